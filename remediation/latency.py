"""The latency signal the rebalance pipeline backs off on: the brokers' Produce p99, from Prometheus.

:class:`PrometheusLatency` runs one instant query (by default the worst broker's p99 of the
Produce ``local`` + ``remote`` stages from the agents' histograms) and returns milliseconds.
Any failure — unreachable, timeout, an empty or malformed answer — returns ``None`` ("unknown"),
which the window treats as "hold": it neither grows nor shrinks on a signal it cannot read.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
import urllib.request

log = logging.getLogger(__name__)

DEFAULT_QUERY = (
    "max(histogram_quantile(0.99, sum by (broker, le) (rate("
    'linkwatch_broker_request_stage_seconds_bucket{request="Produce",stage=~"local|remote"}[1m]))))'
)


class PrometheusLatency:
    def __init__(self, url: str, query: str = DEFAULT_QUERY, timeout_s: float = 2.0) -> None:
        self.url = url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
        self.timeout_s = timeout_s
        self.failures_total = 0

    def __call__(self) -> float | None:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:
                body = json.loads(resp.read(1 << 20))
            value = float(body["data"]["result"][0]["value"][1])
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            self.failures_total += 1
            log.info("latency signal unavailable (%s): holding the window", e)
            return None
        return value * 1000 if value == value else None  # NaN: no requests in the range
