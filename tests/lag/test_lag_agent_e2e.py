"""Cold reads end to end through a real running agent (``linkwatch agent`` subprocess):

* the agent publishes ``HostStats`` to ``linkwatch.samples``; the lag service reads them, computes
  the leader's page-cache window and flags the lagging group (finding and
  ``linkwatch_consumer_cold_read_risk`` on its /metrics); the agent exports
  ``linkwatch_host_page_cache_window_seconds``;
* ``confirm: agent``: the service asks the leader's agent ``GET /page-cache`` about the group's
  committed offset, whose segments the test evicted with ``posix_fadvise(DONTNEED)`` → confirmed,
  and the finding says the agent confirmed it; the caught-up group's bytes are reported resident.
"""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lag.runner import LagConfig, LagService
from linkwatch.records import HostStats
from linkwatch.segments import partition_dir
from testbed.agents import config_for_node, start_agent_process
from testbed.cluster import ClusterState
from testbed.faults import evict_page_cache
from tests.agent.conftest import free_port
from tests.lag.lagkit import make_topic, month_old_topic, write_load

pytestmark = [pytest.mark.cluster, pytest.mark.timing]


def samples(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


@pytest.fixture
def running_agent(cluster3: ClusterState, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator:
    """Start ``linkwatch agent`` for one broker: HostStats every second to linkwatch.samples,
    /metrics and /page-cache on a free loopback port. Yields a starter(broker) -> base URL."""
    procs: list[subprocess.Popen] = []

    def start(broker: int) -> str:
        port = free_port()
        cfg = config_for_node(
            cluster3.node(broker),
            cluster="e2e",
            poll_interval_s=0.2,
            request_log={"enabled": False},
            jmx={"jolokia_url": None},
            metrics={"port": port},
            host={"interval_s": 1.0},
            log_dirs={"interval_s": 600.0, "partition_records": False},
            kafka={
                "enabled": True,
                "bootstrap_servers": cluster3.bootstrap,
                "spool_dir": str(tmp_path / "spool"),
                "send_timeout_s": 5.0,
            },
        )
        procs.append(
            start_agent_process(cfg, tmp_path / f"agent-{broker}.yaml", tmp_path / f"agent-{broker}.log")
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/metrics", timeout=2).read()
                return url
            except OSError:
                if time.monotonic() > deadline or procs[-1].poll() is not None:
                    log = (tmp_path / f"agent-{broker}.log").read_text()[-2000:]
                    raise AssertionError(f"agent for broker {broker} did not serve /metrics: {log}") from None
                time.sleep(0.3)

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_hoststats_window_cold_read_risk_and_agent_confirmation(
    cluster3: ClusterState, admin, topic_name: str, group_name: str, running_agent, tmp_path: Path
) -> None:
    data = month_old_topic(admin, cluster3.bootstrap, topic_name, group_name)
    old, fresh, leader = data.old, data.fresh, data.leader
    pdir = partition_dir(cluster3.node(leader).log_dirs, topic_name, 0)
    url = running_agent(leader)  # linkwatch.samples is created before the agent starts
    findings_topic = make_topic(admin, f"{topic_name}-findings", partitions=3, rf=3)  # none on use

    cfg = LagConfig.model_validate(
        {
            "bootstrap_servers": cluster3.bootstrap,
            "cluster": "e2e",
            "instance": "e2e-1",
            "interval_s": 1.0,
            "collector": {"include": [f"^{old}$", f"^{fresh}$"], "window_s": 3.0, "min_evaluations": 3},
            "metrics": {"port": 0},
            "publish": {"samples": False, "findings": True, "findings_topic": findings_topic},
            "cold_read": {
                "windows_from": "samples",
                "max_host_age_s": 30,
                "confirm": "agent",
                "agent_urls": {leader: url},
            },
            "rack": {"enabled": False},
        }
    )
    service = LagService(cfg)
    stop = threading.Event()
    writer = threading.Thread(target=write_load, args=(stop, tmp_path / "load.bin"), daemon=True)
    writer.start()
    try:
        port = service.serve_metrics()
        time.sleep(0.5)
        for seg in sorted(pdir.glob("*.log"))[:-1]:  # the old segments leave the page cache
            evict_page_cache(seg)
        findings = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            result, sent = service.step()
            findings += [f for f in sent if f.rule == "cold_read_risk"]
            if any(f.subject == f"group:{old}" for f in findings):
                break
            time.sleep(0.5)
        assert service.feed is not None
        host = service.feed.latest.get(leader)
        # The window came from the agent's HostStats records on linkwatch.samples.
        assert isinstance(host, HostStats), (service.feed.latest, result.errors)
        assert (host.cluster, host.source) == ("e2e", f"broker-{leader}")
        assert host.page_cache_bytes > 0 and host.disk_write_bytes_per_s > 0
        f = next(f for f in findings if f.subject == f"group:{old}")
        item = f.evidence["partitions"][0]
        assert item["leader"] == leader and item["lag_seconds"] > 29 * 86400 > item["page_cache_window_s"] > 0
        # Confirmed on the broker by its agent, from the evicted segment's pages.
        assert item["confirmed"] is True, item
        assert item["confirmed_by"] == "agent" and f"[agent {url}]" in item["confirmation"]
        assert item["resident_fraction"] < 0.5
        assert "1 confirmed by the leader's agent" in f.summary
        # The lagging group is flagged on /metrics; the caught-up one only if its few seconds of
        # lag exceed the measured window (a shared machine can write fast).
        window = item["page_cache_window_s"]
        metrics = samples(f"http://127.0.0.1:{port}/metrics")
        risky = {
            (s["group"], s["topic"], s["partition"], s["broker"])
            for s, v in metrics["linkwatch_consumer_cold_read_risk"]
            if v == 1.0
        }
        fresh_lag = result.groups[fresh].lag_seconds_max or 0
        expected = {g for g, lag in ((old, 1e12), (fresh, fresh_lag)) if lag > window}
        assert risky == {(g, topic_name, "0", str(leader)) for g in expected}, (risky, fresh_lag, window)
        # The agent exports the window itself.
        agent_metrics = samples(f"{url}/metrics")
        (labels, value), *_ = agent_metrics["linkwatch_host_page_cache_window_seconds"]
        assert labels["broker"] == str(leader) and 0 < value < float("inf")
        # The caught-up group's next bytes are resident, as the agent reports.
        query = f"topic={topic_name}&partition=0&offset={4000 + 35}&skip_bytes=0&span_bytes=4096"
        warm = orjson.loads(urllib.request.urlopen(f"{url}/page-cache?{query}", timeout=5).read())
        assert warm["confirmed"] is False and warm["resident_fraction"] == 1.0, warm
    finally:
        stop.set()
        writer.join()
        service.close()
