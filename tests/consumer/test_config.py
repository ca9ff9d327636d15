"""The sample config loads; bad values stop start-up naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumer import AsyncFetchConsumer, ConsumerConfig
from linkwatch.config import load_config
from linkwatch.errors import ConfigError

SAMPLE = Path(__file__).parents[2] / "config" / "consumer.yaml"


def test_sample_config_loads_with_the_defaults():
    # The sample names the cluster every sample shares (tests/test_samples.py), not the default.
    cfg = load_config(SAMPLE, ConsumerConfig)
    assert cfg == ConsumerConfig(cluster=cfg.cluster)


@pytest.mark.parametrize(
    ("yaml_text", "named"),
    [
        ("buffer_max_bytes: 0", "buffer_max_bytes=0"),
        ("buffer_max_records: -5", "buffer_max_records=-5"),
        ("on_exhausted: ignore", "on_exhausted='ignore'"),
        ("auto_offset_reset: middle", "auto_offset_reset='middle'"),
        ("max_retries: -1", "max_retries=-1"),
        ("buffer_max_byte: 10", "buffer_max_byte: unknown key"),
        ("commit_interval_ms: soon", "commit_interval_ms='soon'"),
        ("trace_spans: poll", "trace_spans='poll'"),
    ],
)
def test_bad_config_names_the_key(tmp_path, yaml_text, named):
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError, match=named):
        load_config(path, ConsumerConfig)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({}, "either topics"),
        ({"topics": ["t"], "partitions": [("t", 0)]}, "either topics"),
        ({"topics": ["t"]}, "group_id"),
    ],
)
def test_subscribe_or_assign(kwargs, named):
    with pytest.raises(ConfigError, match=named):
        AsyncFetchConsumer(ConsumerConfig(), **kwargs)
