"""linkwatch: the shared core (``docs/architecture.md`` has the floors).

The core imports no other linkwatch package; every subsystem may import it:

* :mod:`.records` — the versioned record schema (stdlib only) on the samples and findings topics;
* :mod:`.aggregates` — the aggregated rows ``spark_metrics`` builds and detectors read (stdlib only);
* :mod:`.sketch` — mergeable latency sketches;
* :mod:`.lossy_counting` — hot keys in a stream (the analyzer's and the producer partitioner's);
* :mod:`.config`, :mod:`.errors` — config loading validated at start-up; errors for the operator;
* :mod:`.segments`, :mod:`.pagecache` — an offset's place in a partition's log on disk, and whether
  it is in the page cache (the agent's endpoint and the lag collector's local check);
* :mod:`.maven` — jars from Maven Central in a local cache.

Above it: ``findings/`` (the findings lifecycle, policy and pipeline), then the subsystems, then
``testbed/`` (what tests and the demo run on) and ``cli/`` (the ``linkwatch`` command).
"""
