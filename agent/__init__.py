"""Broker agent: follows the request log, JMX, log dirs and host; exports sketches and gauges.

* ``requestlog/`` — ``follow.py`` (tail -F), ``parse.py`` (one line -> request type + stages),
  ``window.py`` (10 s sketches per request type and stage, slow exemplars), ``source.py``.
* ``jmx/collector.py`` — Jolokia bulk reads or a JMX-exporter endpoint -> window means, gauges.
* ``logdirs.py`` — partition sizes and segments per log dir, disk usage and io util; host stats.
* ``exporters/prometheus.py`` — ``/metrics``; ``output/kafka.py`` + ``output/spool.py`` —
  ``linkwatch.samples`` through a bounded on-disk spool; ``output/otlp.py`` — slow-request spans.
* ``pagecache_http.py`` — ``GET /page-cache`` (the check itself: :mod:`linkwatch.pagecache`).
* ``capture.py`` — capture policy (slow-only log4j2 filter, BROKER_LOGGER capture windows).
* ``config.py`` — the validated config; ``runner.py`` — :class:`agent.runner.Agent` (agents for
  a test cluster: :mod:`testbed.agents`).
"""
