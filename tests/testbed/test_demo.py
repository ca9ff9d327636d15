"""The demo runs to the end by itself, shows the slow broker, and leaves nothing behind."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from testbed import demo
from testbed.cluster import pid_alive

# Real brokers under faults or live traffic: timing-sensitive on a shared machine (one rerun).
pytestmark = [pytest.mark.cluster, pytest.mark.timing]


def test_demo_runs_to_the_end_and_cleans_up(tmp_path: Path) -> None:
    out = io.StringIO()
    root = tmp_path / "demo"
    opts = demo.DemoOptions(duration_s=24, rate_per_s=400, partitions=6, root=root, refresh_s=1.0)
    pids: list[int] = []

    class RecordPids:
        name = "pids"

        def start(self, cluster) -> None:
            pids.extend(n.pid for n in cluster.nodes)

        def lines(self) -> list[str]:
            return [f"watching {len(pids)} brokers"]

        def stop(self) -> None:
            pass

    opts.components = [*demo.default_components(tmp_path / "stack"), RecordPids]
    summary = demo.run(opts, Console(file=out, width=120))
    text = out.getvalue()
    assert "3 brokers up" in text and "PAUSED" in text and "watching 3 brokers" in text
    # Its cluster creates no topic on use: linkwatch's own were created first, and every part ran.
    assert "created linkwatch.samples, linkwatch.findings" in text
    # The agents' per-stage p99 table appeared once their first window closed.
    assert "agent p99 ms, last window" in text and "b2 Produce" in text
    # The probe ran beside them: the clients' view of every leader, once its first window closed.
    assert "probe (clients' view of each leader)" in text
    assert all(f"broker {b}" in text.split("probe (clients' view")[-1] for b in (1, 2, 3)), text[-2000:]
    assert summary["acked"] > 0.9 * 24 * 400 * 0.8 and summary["errors"] == 0
    assert summary["consumed"] > 0
    p50 = summary["median_p50_ms_by_phase"]
    # Broker 2 slowed the most against its own baseline: on a loaded machine the brokers' absolute
    # latencies differ by more than the pause adds, but each broker's own before/during ratio holds.
    slowdown = {b: p50["during"][b] / max(p50["before"][b], 1e-3) for b in (1, 2, 3)}
    assert slowdown[2] > slowdown[1] and slowdown[2] > slowdown[3], p50
    assert len(pids) == 3 and not any(pid_alive(p) for p in pids)
    assert not root.exists()
