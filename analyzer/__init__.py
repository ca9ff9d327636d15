"""Analyzer: detector plugins (pure functions of aggregated rows) that return findings.

* :mod:`.base` — the contract (detector, policy, sink); :mod:`.registry` — detectors by entry point;
* :mod:`.slow_broker`, :mod:`.skewed_partitions`, :mod:`.hot_keys`, :mod:`.disk_imbalance` — the rules;
* :mod:`.engine` — detect → decide → act; :mod:`.sinks` — findings topic, Prometheus, terminal;
* :mod:`.service` — the running analysis over the Spark stream; :mod:`.report` — the batch report.
"""
