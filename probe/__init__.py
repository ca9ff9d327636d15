"""``linkwatch probe``: a probe partition led by every broker, measured continuously.

* :mod:`probe.topic` — the probe topic kept with one partition per live broker (the plan rules
  and the admin calls that apply them; only this topic is ever changed);
* :mod:`probe.ledger` — which probe went to which leader and what became of it: produce and
  end-to-end latency sketches and availability per leader broker and window;
* :mod:`probe.metrics` — the Prometheus series (by broker);
* :mod:`probe.service` — the loop: send, read back with the async-fetch consumer, report
  windows as metrics and ``ProbeSample`` records on ``linkwatch.samples``;
* :mod:`probe.config` — the validated configuration.
"""
