"""The findings pipeline on the real 3-broker cluster: a slow-broker finding handed to the
analyzer's pipeline (``linkwatch analyze`` with a ``remediation:`` section, dry run) audits a
demotion plan, notifies it, and changes nothing on the cluster. Spark is not started: the
finding enters where the analyzer's engine acts on it (its sinks), after detection."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from alerts.hooks.memory import MemoryNotifier
from analyzer.service import AnalysisService, AnalyzerConfig
from remediation.audit import read_audit
from remediation.view import read_view
from testbed.cluster import ClusterState
from tests.remediation.kit import config, create_topic, demoting, finding, leaders, replica_dirs

pytestmark = [pytest.mark.cluster]

RF3 = {p: [p % 3 + 1, (p + 1) % 3 + 1, (p + 2) % 3 + 1] for p in range(6)}


def test_analyzer_pipeline_dry_run_audits_plan_changes_nothing(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path
) -> None:
    create_topic(admin, topic_name, RF3)
    rcfg, path = config(
        tmp_path,
        cluster3.bootstrap,
        execute=False,
        **demoting(topic_name),
    )
    cfg = AnalyzerConfig.model_validate(
        {
            "bootstrap": cluster3.bootstrap,
            "state_dir": str(tmp_path / "analyzer"),
            "prometheus": {"enabled": False},
            "remediation": {"config": str(path), "notifiers": [{"type": "memory"}]},
        }
    )
    service = AnalysisService(cfg, sinks=[])
    assert service.pipeline is not None
    mem = service.pipeline.dispatcher.notifiers[0].hook
    assert isinstance(mem, MemoryNotifier)
    before = (
        read_view(admin, [topic_name]).summary(),
        replica_dirs(admin, topic_name),
        leaders(admin, topic_name),
    )
    assert 2 in before[2].values()

    service.engine.act(finding("slow_broker", "broker:2", stage="local"))
    time.sleep(2)

    after = (
        read_view(admin, [topic_name]).summary(),
        replica_dirs(admin, topic_name),
        leaders(admin, topic_name),
    )
    assert after == before  # metadata, leaders, log dirs, configs and throttles unchanged
    events, dropped = read_audit(rcfg.audit_path)
    assert dropped == 0
    plans = [e for e in events if e["event"] == "plan"]
    assert len(plans) == 1 and plans[0]["plan"]["demotes"] == [2] and plans[0]["plan"]["steps"]
    assert [e["event"] for e in events][-1] == "dry_run"
    (note,) = mem.events
    assert note.labels["linkwatch_action"] == "remediate" and '"dry_run"' in note.annotations["outcome"]
    assert service.pipeline.errors == {}
