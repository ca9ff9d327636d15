"""The Spark session of the test run, for the tests that compare the Spark path with the
incremental state (the same session: ``spark_session`` gets or creates one per process)."""

from tests.spark_metrics.conftest import spark

__all__ = ["spark"]
