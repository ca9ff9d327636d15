"""The table of bench smoke runs (tests/bench/test_bench_*.py run them): every benchmark in
``bench/`` runs at its smoke size and prints its table, so a change that
breaks a bench fails here instead of on the day someone measures.

Each bench runs as its users run it (``python bench/<name>.py``, a process of its own, from the
repository root) with ``--smoke``; one that needs Kafka gets the session cluster
(``--bootstrap`` or ``--cluster-dir``), except ``agent_capture_cost``, which needs brokers with a
log4j2 configuration of its own and starts a 1-node cluster. The assertions are that the bench
exits 0 and prints the lines its table is made of. Smoke sizes measure nothing worth recording:
figures come from the full sizes on a quiet machine (``bench/results/``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed.cluster import ClusterState

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


@dataclass(frozen=True)
class Bench:
    script: str
    args: tuple[str, ...]  # {bootstrap} and {cluster_dir} are filled from the session cluster
    table: tuple[str, ...]  # regular expressions, each found in the output
    timeout_s: float = 240.0
    own_cluster: bool = False  # starts brokers of its own: a `cluster` test though it takes none
    check: Callable[[str], None] | None = None  # asserts what the printed figures must say
    # The test file that runs it: the minutes-long smokes each have their own, so that the
    # suite's workers run them side by side (a file's tests stay in one worker).
    part: str = "smoke"
    timing: bool = False  # waits on real brokers under a fault: one rerun (tests/conftest.py)

    def param(self) -> Any:
        marks = [pytest.mark.cluster] if self.own_cluster else []
        if self.timing:
            marks.append(pytest.mark.timing)
        return pytest.param(self, marks=marks, id=self.script)

    @property
    def needs_cluster(self) -> bool:
        return any("{" in a for a in self.args)


def _the_holder_waits_less(out: str) -> None:
    """The lease thread's short turn leaves the holder's calls a shorter wait than the baseline's
    200 ms poll re-taken at once (a wait of about one poll against most of a second)."""
    m = re.search(r"median wait, baseline / product: ([\d.]+) ms / ([\d.]+) ms", out)
    assert m, out
    assert float(m[2]) < float(m[1]), out


def _the_holder_keeps_the_lease(out: str) -> None:
    """A standby joining never takes the lease from a live holder as shipped, the first member
    always comes to hold it, and no sample in either variant has both members holding it (the
    baseline may lose it, or never hold it: those are the races)."""
    m = re.search(r"from a live holder, baseline / product: (\d+) / (\d+)", out)
    assert m, out
    assert int(m[2]) == 0, out
    m = re.search(r"never held the lease within \d+ s, baseline / product: (\d+) / (\d+)", out)
    assert m, out
    assert int(m[2]) == 0, out
    rows = r"^(product|baseline)\s+\d+/\d+\s+\d+\s+[\d.]+\s+[\d.]+\s+\d+\s+\d+\s+(\d+)"
    for row in re.finditer(rows, out, re.M):
        assert int(row[2]) == 0, f"both members held the lease ({row[1]}): {out}"


def _the_loop_ran_in_order(out: str) -> None:
    """The remediation loop on the real cluster (the demo's agents, Spark analyzer and executed
    remediation config; testbed.recovery): broker 2 paused while it leads → the slow_broker
    finding → broker 2 demoted → the acks=1 producer's p99 back under 300 ms, in that order; then
    the fault removed, the finding cleared and leadership back no sooner than the hold time."""
    number = r"\s*([\d.]+)"
    m = re.search(
        rf"with remediation round 1: finding{number} s, demoted{number} s, recovered{number} s,"
        rf".*leadership restored{number} s after the fault",
        out,
    )
    # The bench's own lines (not Spark's log, which fills the tail): they say which step was late.
    figures = "\n".join(line for line in out.splitlines() if "remediation" in line or " s after" in line)
    assert m, f"a step of the loop was not reached:\n{figures}"
    finding, demoted, recovered, restored = map(float, m.groups())
    assert finding <= demoted <= recovered + 5.0, (finding, demoted, recovered)
    hold = re.search(rf"restore hold{number} s", out)
    assert hold, out[:2000]
    assert restored >= float(hold[1]), (
        f"leadership back {restored} s after the fault, before the {hold[1]} s hold"
    )


# The test file of each part: tests/bench/test_bench_<part>.py.
PARTS = ("smoke", "spark", "fleet", "recover")

BENCHES = [
    Bench("agent_ingest.py", ("--smoke",), (r"agent / orjson full parse = \d", r"baseline json\.loads loop")),
    Bench(
        "agent_logdirs.py", ("--smoke",), (r"partition records on \(default\)\s+\d+ records", r"heap peak")
    ),
    Bench("decode_compare.py", ("--smoke",), (r"path\s+µs/record\s+ratio", r"DeliveryRecords\s+\d")),
    Bench("fault_matrix.py", ("--smoke",), (r"scenario\s+path\s+verdict", r"replay\s+\w+")),
    Bench(
        "spark_aggregate.py",
        ("--smoke",),
        (r"^spark \(local\[2\]\): [\d.]+s", r"rows differing from duckdb: spark 0", r"numpy floor"),
        part="spark",
    ),
    Bench(
        "analyzer_tick.py",
        ("--smoke",),
        (r"reread\s+tick: median", r"incremental tick: median", r"same aggregates"),
        part="spark",
    ),
    Bench(
        "lag_pass.py",
        ("--bootstrap", "{bootstrap}", "--smoke"),
        (r"way\s+wall s \(median\)", r"^pass\s+[\d.]+", r"^per group\s+[\d.]+", r"pass / admin floor"),
    ),
    Bench(
        "lease_lock.py",
        ("--bootstrap", "{bootstrap}", "--smoke"),
        (
            r"product \(poll \d+ ms, idle \d+ ms\)\s+\d+",
            r"baseline \(poll 200 ms, idle 0 ms\)\s+\d+",
            r"median wait, baseline / product",
        ),
        check=_the_holder_waits_less,
    ),
    Bench(
        "lease_handover.py",
        ("--bootstrap", "{bootstrap}", "--smoke"),
        (r"^product\s+\d+/\d+", r"^baseline\s+\d+/\d+", r"from a live holder, baseline / product"),
        check=_the_holder_keeps_the_lease,
    ),
    Bench(
        "lag_big_group.py",
        ("--bootstrap", "{bootstrap}", "--smoke"),
        (r"pass \(lag msgs, status, outputs\)\s+[\d.]+", r"tracemalloc peak of one pass"),
    ),
    Bench(
        "consumer_compare.py",
        ("--cluster-dir", "{cluster_dir}", "--smoke"),
        (r"case\s+client\s+rec/s", r"healthy\s+AsyncFetchConsumer\s+\d", r"healthy\s+KafkaConsumer\s+\d"),
    ),
    Bench(
        "consumer_drain.py",
        ("--cluster-dir", "{cluster_dir}", "--smoke"),
        (r"AsyncFetchConsumer\s+\d+ rec/s", r"throughput ratio per round"),
    ),
    Bench(
        "probe_cost.py",
        ("--cluster-dir", "{cluster_dir}", "--smoke"),
        (r"per second over all 3 brokers\s+idle\s+probe", r"probe process: CPU"),
    ),
    Bench(
        "skew_partitioner.py",
        ("--cluster-dir", "{cluster_dir}", "--smoke"),
        (r"medians of 1 runs", r"1\.2 skew_aware\s+\d", r"skew_aware vs default"),
    ),
    Bench(
        "reassign_window.py",
        ("--cluster-dir", "{cluster_dir}", "--smoke"),
        (r"sliding window [\d.]+ s\s+fixed batches [\d.]+ s",),
    ),
    Bench(
        "spark_detection_delay.py",
        ("--cluster-dir", "{cluster_dir}", "--smoke"),
        (r"first stage rows after", r"runs: 1, found in [01]", r"evaluations: \d+"),
        timeout_s=420.0,
        part="spark",
    ),
    Bench(
        "fleet.py",
        ("--smoke", "--replay"),
        (r"replay \(no broker, no Spark\)", r"^\s+10\s+\d+\s+[\d.]+/[\d.]+\s+[\d.]+/[\d.]+\s+\d+\s+\d+"),
        part="fleet",
    ),
    Bench(
        "fleet.py",
        # Both window feeds: the driver's (the default) and the Spark query's (window_feed: spark).
        ("--bootstrap", "{bootstrap}", "--smoke", "--window-feeds", "driver,spark"),
        (
            r"brokers\s+feed\s+rec/s in\s+window→eval",
            r"^\s+10\s+driver\s+\d+\s+[\d.]+/[\d.]+\s+[\d.]+/[\d.]+",
            r"^\s+10\s+spark\s+\d+\s+[\d.]+/[\d.]+\s+[\d.]+/[\d.]+",
        ),
        timeout_s=420.0,
        part="fleet",
    ),
    Bench(
        "remediation_recover.py",
        ("--cluster-dir", "{cluster_dir}", "--smoke"),
        (r"with remediation round 1", r"time from fault onset to acks=1 producer p99"),
        timeout_s=720.0,
        check=_the_loop_ran_in_order,
        part="recover",
        timing=True,
    ),
    Bench(
        "agent_capture_cost.py",
        ("--smoke",),
        (r"cluster A: medians of 1 rounds", r"off\b", r"always\b"),
        timeout_s=420.0,
        own_cluster=True,
    ),
]


def run(bench: Bench, cluster: ClusterState | None) -> str:
    args = [
        a.format(bootstrap=cluster.bootstrap, cluster_dir=cluster.root) if cluster else a for a in bench.args
    ]
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(BENCH / bench.script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=bench.timeout_s,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out = proc.stdout
    print(f"{bench.script}: {time.monotonic() - started:.1f}s, exit {proc.returncode}")
    assert proc.returncode == 0, (
        f"{bench.script} exited {proc.returncode}\n{out[-3000:]}\n{proc.stderr[-3000:]}"
    )
    missing = [rx for rx in bench.table if not re.search(rx, out, re.MULTILINE)]
    assert not missing, f"{bench.script} printed no {missing}:\n{out[-3000:]}"
    if bench.check is not None:
        bench.check(out)
    return out


def params(part: str, cluster: bool) -> list[Any]:
    """The pytest params of the benches of ``part`` that need (or do not need) the session cluster."""
    return [b.param() for b in BENCHES if b.part == part and b.needs_cluster == cluster]


def bench_tests(part: str) -> tuple[Callable[..., None], Callable[..., None]]:
    """The two tests of a part's file, bound there to the names pytest collects
    (``test_bench_without_a_cluster``, ``test_bench_on_the_session_cluster``): its benches without
    a cluster, and those on the session cluster."""

    @pytest.mark.parametrize("bench", params(part, cluster=False))
    def without_a_cluster(bench: Bench) -> None:
        run(bench, None)

    @pytest.mark.parametrize("bench", params(part, cluster=True))
    def on_the_session_cluster(bench: Bench, cluster3: ClusterState) -> None:
        run(bench, cluster3)

    return without_a_cluster, on_the_session_cluster
