"""One aggregation: what the Spark path and the analyzer's incremental state both compute.

* :mod:`.sketch_math` — the sketch arithmetic (bucket merges per log-bucket key, quantiles with
  the nonzero p99, means, logged requests under a capture ratio), written once in numpy;
* :mod:`.window_state` — the incremental per-window state of the streaming analyzer, which
  merges each record once and reads the aggregates with :mod:`.sketch_math`.

The Spark side (:mod:`spark_metrics.sketch_merge`) hands its Arrow batches to the same
:func:`.sketch_math.merge`. This package imports only the core (``linkwatch``) and numpy: no
pyspark, so the analyzer's state and a detector plugin run without a Spark session.
"""
