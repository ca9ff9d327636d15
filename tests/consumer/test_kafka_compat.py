"""The kafka-python version guard: the consumer refuses a version whose internals it does not know."""

from __future__ import annotations

import kafka
import pytest

from consumer import AsyncFetchConsumer, ConsumerConfig
from consumer.kafka_compat import (
    SUPPORTED_VERSION,
    CoordinatorBackoff,
    UnsupportedKafkaPythonError,
    check_version,
)


def test_the_installed_version_is_the_supported_one():
    assert kafka.__version__ == SUPPORTED_VERSION
    check_version()
    # the consumer constructs without touching the network
    AsyncFetchConsumer(ConsumerConfig(), partitions=[("t", 0)])


@pytest.mark.parametrize("installed", ["3.0.11", "3.0.13", "3.1.0", "2.2.15", "3.0.12.dev0", ""])
def test_another_version_is_refused_with_both_versions_named(installed):
    with pytest.raises(UnsupportedKafkaPythonError) as err:
        check_version(installed)
    assert err.value.installed == installed
    message = str(err.value)
    assert f"kafka-python {installed} is installed" in message
    assert f"kafka-python=={SUPPORTED_VERSION}" in message
    assert "kafka_compat.py" in message


@pytest.mark.parametrize(
    ("events", "at", "delay"),
    [
        ([], 5.0, 0.0),  # no death: no wait
        ([("dead", 1.0)], 1.0, 0.1),  # first death: the initial backoff
        ([("dead", 1.0)], 1.05, 0.05),  # part of it already passed
        ([("dead", 1.0)], 1.5, 0.0),  # passed
        ([("dead", 1.0), ("dead", 1.1), ("dead", 1.3)], 1.3, 0.4),  # doubling while dying in a row
        ([("dead", t / 10) for t in range(10)], 0.9, 1.0),  # capped at the max
        ([("dead", 1.0), ("found", 1.2), ("dead", 1.4)], 1.4, 0.2),  # found, died again soon: still doubling
        ([("dead", 1.0), ("found", 1.2), ("dead", 2.5)], 2.5, 0.1),  # alive for max: reset
    ],
)
def test_coordinator_backoff(events, at, delay):
    backoff = CoordinatorBackoff(100, 1000)
    for what, t in events:
        if what == "dead":
            backoff.on_dead(t)
        else:
            backoff.found_at = t
    assert backoff.delay(at) == pytest.approx(delay)
