"""The window stream's micro-batch handler on a real Spark stream (the built-in ``rate``
source stands in for Kafka, which the handler does not depend on).

Spark 4.0 matches a failed Python ``foreachBatch`` callback's message against a pattern that
recurses once per character; a failed ``collect`` carries the whole Java stack trace, and the
live run's window stream died of a ``StackOverflowError`` in ``java.util.regex`` on its stream
thread. The handler keeps that text out of Spark: the query fails with a short error, or, while
the service is stopping it, ends quietly.
"""

from __future__ import annotations

import threading

import pytest
from pyspark.errors import StreamingQueryException

from spark_metrics.streaming import window_batch_handler

# What a failed collect's Py4JJavaError looks like to Spark: the marker its pattern looks for,
# then a long Java stack trace without an interruption in it.
LONG_JAVA_ERROR = "py4j.protocol.Py4JJavaError: An error occurred while calling o123.collectToPython.\n" + (
    "\tat org.apache.spark.SomeClass.someMethod(SomeClass.scala:42)\n" * 4000
)


def _rate_query(spark, handler):
    rows = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    return (
        rows.selectExpr("cast(value as string) as value")
        .writeStream.foreachBatch(handler)
        .trigger(processingTime="200 milliseconds")
        .start()
    )


@pytest.mark.timeout(180)
def test_a_failed_batch_fails_the_query_with_a_short_error_not_a_stack_overflow(spark) -> None:
    def on_batch(values: list[str]) -> None:
        if values:
            raise RuntimeError(LONG_JAVA_ERROR)

    query = _rate_query(spark, window_batch_handler(on_batch, threading.Event()))
    with pytest.raises(StreamingQueryException) as err:
        query.awaitTermination(120)
    message = str(err.value)
    assert "WindowBatchError" in message and "failed: RuntimeError" in message, message[:2000]
    assert "SomeClass" not in message
    assert not query.isActive


@pytest.mark.timeout(180)
def test_a_batch_failing_while_the_query_stops_ends_it_quietly(spark) -> None:
    """The live run's case: stop() cancels the running collect, which raises a long Java error
    *after* the query is marked terminated. Only then does Spark run its pattern, and an
    unguarded callback killed the stream thread with a StackOverflowError (reproduced with a
    plain callback on this stream: ``Exception in thread "stream execution thread …"
    java.lang.StackOverflowError``)."""
    stopping, started, release = threading.Event(), threading.Event(), threading.Event()
    raised: list[BaseException] = []
    outcomes: list[BaseException | None] = []

    def on_batch(values: list[str]) -> None:
        if values:
            started.set()
            release.wait(60)
            raised.append(RuntimeError(LONG_JAVA_ERROR))
            raise raised[-1]

    handler = window_batch_handler(on_batch, stopping)

    def recording(df, batch_id: int) -> None:
        try:
            handler(df, batch_id)
        except BaseException as e:
            outcomes.append(e)
            raise
        outcomes.append(None)

    query = _rate_query(spark, recording)
    assert started.wait(60), "no micro-batch with rows within 60 s"
    stopping.set()  # as AnalysisService.stop does before stopping the query
    threading.Timer(1.0, release.set).start()  # the batch fails once the stop is under way
    query.stop()
    assert raised, "the batch did not fail"
    assert outcomes[-1] is None, f"the handler let the error reach Spark: {outcomes[-1]!r}"[:300]
    assert not query.isActive
    assert query.exception() is None
