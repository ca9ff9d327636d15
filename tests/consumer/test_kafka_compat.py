"""The kafka-python version guard: the consumer refuses a version whose internals it does not know."""

from __future__ import annotations

import kafka
import pytest

from linkwatch.consumer import AsyncFetchConsumer, ConsumerConfig
from linkwatch.consumer.kafka_compat import SUPPORTED_VERSION, UnsupportedKafkaPythonError, check_version


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
