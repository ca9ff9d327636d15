"""Grafana dashboards as code (grafana-foundation-sdk, Grafana 11.6 line).

* :mod:`dashboards.build` — the five dashboards (cluster overview, broker latency breakdown,
  slow nodes, skew and balance, consumers) and :func:`~dashboards.build.write_all`, which
  writes them as JSON into a chosen directory; the generated ``dashboards/*.json`` ship in
  the package.
* :mod:`dashboards.push` — pushing them to a Grafana over its HTTP API (standard library).
* ``dashboards/provisioning/`` — Grafana file-provisioning YAML (dashboards + data source).
"""
