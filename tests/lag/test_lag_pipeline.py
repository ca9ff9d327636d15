"""The lag collector with a ``remediation:`` section, on the real cluster: a stopped group's
finding goes through the findings pipeline to its notifiers, once (repeats are not sent)."""

from __future__ import annotations

import time

import pytest
from kafka import TopicPartition

from lag.runner import LagConfig, LagService
from tests.lag.lagkit import commit, make_topic


@pytest.mark.cluster
def test_lag_findings_go_through_the_pipeline(cluster3, admin, topic_name, producer, group_name) -> None:
    make_topic(admin, topic_name)
    tp = TopicPartition(topic_name, 0)
    for _ in range(30):
        producer.send(topic_name, b"v", partition=0)
    producer.flush()
    commit(admin, group_name, {tp: 10})
    cfg = LagConfig.model_validate(
        {
            "bootstrap_servers": cluster3.bootstrap,
            "cluster": "test",
            "instance": "one",
            "collector": {"include": [f"^{group_name}$"], "window_s": 2.0, "min_evaluations": 3},
            "metrics": {"enabled": False},
            "publish": {"samples": False, "findings": False},
            "cold_read": {"windows_from": "static"},
            "remediation": {"notifiers": [{"type": "memory"}]},
        }
    )
    service = LagService(cfg)
    try:
        assert service.pipeline is not None
        for _ in range(8):
            service.step()
            time.sleep(0.5)
    finally:
        service.close()
    mem = service.pipeline.dispatcher.notifiers[0].hook
    lag = [e for e in mem.events if e.labels["alertname"] == "consumer_lag"]
    assert [(e.labels["subject"], e.labels["linkwatch_action"]) for e in lag] == [
        (f"group:{group_name}", "notify")
    ]
    assert service.pipeline.errors == {}
