"""The demo runs to the end by itself, shows the slow broker, and leaves nothing behind."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from testbed import demo
from testbed.cluster import JVM_ARGS_ENV, pid_alive

# Real brokers under faults or live traffic: timing-sensitive on a shared machine (one rerun).
pytestmark = [pytest.mark.minutes(1), pytest.mark.cluster, pytest.mark.timing]


def test_demo_runs_to_the_end_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The demo's brokers run as `make demo` runs them, with full JIT, not the suite's C1-only
    # default (tests/conftest.py): with C1-only brokers its consumer had not joined its group
    # after 60 s and read nothing, in the first try of a whole-suite run (ci28, and three of
    # three at 41272c5; three runs of the file alone passed). The consumer now says its last
    # error in that line (testbed.load.ConsumerLoad.error); the cause is not found yet.
    monkeypatch.setenv(JVM_ARGS_ENV, "")
    out = io.StringIO()
    root = tmp_path / "demo"
    # 200 msg/s: enough records per broker and phase for the means below (each at least 100),
    # and the load generator (kafka-python, in this process) does not take a core of its own.
    opts = demo.DemoOptions(duration_s=24, rate_per_s=200, partitions=6, root=root, refresh_s=1.0)
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
    assert summary["acked"] > 0.9 * opts.duration_s * opts.rate_per_s * 0.8 and summary["errors"] == 0
    assert summary["consumed"] > 0, [line for line in text.splitlines() if "consumer" in line]
    # The fault really ran: the pausing thread shares the demo's interpreter, which may delay it.
    assert summary["pause_cycles"] >= 0.5 * summary["fault_s"], summary
    # During the fault, broker 2 is the slowest broker. A JVM paused 400 ms of every 1000 ms holds
    # every request that reaches it in a pause until it resumes, and the client's batches for its
    # partitions queue behind it: every record sent to it then carries part of the stall, so its
    # records' mean ack latency rises (the mean integrates the stall over hundreds of records; a
    # p99 is a handful, and the machine's own hiccups reach it on every broker). The brokers are
    # compared over the same span, so the load that swings them all at once cancels. Not
    # asserted: that broker 2 stands out more than in its fault-free phases. The client shares one
    # interpreter with the agents, the probe and the lag collector, and which broker its records
    # find slowest without a fault varies from run to run by more than the pause adds (measured:
    # broker 2's mean at 2.7x the median broker's before the fault in one run, 2.6x after it in
    # another, and 1.6-2.6x during it in nine).
    during = summary["ack_ms_by_phase"]["during"]
    assert len(during) == 3 and all(q["n"] >= 100 for q in during.values()), during
    assert max(during, key=lambda b: during[b]["mean"]) == 2, summary["ack_ms_by_phase"]
    assert len(pids) == 3 and not any(pid_alive(p) for p in pids)
    assert not root.exists()
