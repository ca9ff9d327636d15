"""Testbed: what tests, benchmarks and the demo run on; no subsystem imports it.

* :mod:`.cluster` — a real local Kafka cluster (KRaft, loopback) from Maven Central jars
  (:mod:`.jars`, ``kafka-pom.xml``);
* :mod:`.spark` — a real Spark standalone cluster (master and workers from pyspark's
  ``spark-class``, loopback) to submit the analyzer to;
* :mod:`.load` — produce and consume load; :mod:`.faults` — reversible faults (the pause duty
  cycle in a process of its own, :mod:`.pause_cycle`);
* :mod:`.agents` — agents for the nodes of a test cluster, in threads or as subprocesses;
* :mod:`.fleet` — a synthetic fleet of N brokers' agent records (latencies from a real request
  log capture, ``fleet_capture.json``), with faults, on the samples topic (``linkwatch fleet``);
* :mod:`.alert_stack` — Prometheus, Alertmanager and the receiver on loopback;
* :mod:`.demo` — ``linkwatch demo``: the timeline and its components.
"""
