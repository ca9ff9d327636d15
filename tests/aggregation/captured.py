"""The recorded cases the aggregation is pinned on, and the rows it gave for them.

Cases (:data:`CASES`): the agent's own windows (2 s) over the two committed request-log
captures (``tests/agent/fixtures``) — each as one broker, one as three brokers of which two
sampled their capture (``logged`` below ``count``), and both laid onto the same minute as two
brokers — aggregated in 10 s windows, so a cell merges five agent sketches and a cluster row
merges the brokers'; and the hand-built scenarios of :data:`tests.aggregation.window_records.SCENARIOS`
(partition traffic, log dirs, exemplars, probes) in 2 s windows.

``fixtures/captured_aggregates.json`` holds, per case, every row set of the
:class:`linkwatch.aggregates.Aggregates` the Spark path collected for it, computed by the tree
before the sketch arithmetic had one home (commit 180f668), where the three implementations of
that time — the exploding Spark SQL transforms, the Arrow merge and the incremental window
state — agreed on every row (to 1e-9 relative, the two Spark paths on the stage rows). The
JVM start times (row set ``broker_starts`` and its scenario) came later, pinned to the rows worked
out by hand in the scenario's comments; the stage rows' connection figures (``connections``,
``saturated_connections``) later still, added to the pinned rows from the Spark path with every
other field unchanged. Window starts are stored relative to the case's first
window. Rewrite it only for a deliberate change of
the arithmetic::

    .venv/bin/python -m tests.aggregation.captured
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from agent.health import Health
from agent.requestlog.ingest import ingest_lines
from agent.requestlog.parse import LineParser
from agent.requestlog.window import ClosedWindow, WindowAggregator
from linkwatch import records as R
from linkwatch.aggregates import (
    Aggregates,
    BrokerStartWindow,
    ClientWindow,
    ImbalanceWindow,
    LogDirWindow,
    PartitionWindow,
    ProbeBrokerWindow,
    StageWindow,
)
from tests.aggregation.window_records import CLUSTER, ROW_SETS, SCENARIOS, T0
from tests.aggregation.window_records import WINDOW_S as SCENARIO_WINDOW_S

CAPTURES = Path(__file__).parents[1] / "agent" / "fixtures"
GOLDEN = Path(__file__).parent / "fixtures" / "captured_aggregates.json"
AGENT_WINDOW_S = 2
CAPTURE_WINDOW_S = 10
# Cases are laid one after the other in time, this far apart (window-aligned, far past any
# case's own span), so one Spark job computes them all and no aggregate spans two.
SPAN_MS = 3_600_000

ROW_TYPES: dict[str, type] = {
    "broker_stages": StageWindow,
    "cluster_stages": StageWindow,
    "partitions": PartitionWindow,
    "logdirs": LogDirWindow,
    "imbalances": ImbalanceWindow,
    "client_windows": ClientWindow,
    "probes": ProbeBrokerWindow,
    "broker_starts": BrokerStartWindow,
}


def agent_windows(capture: str, broker: int) -> list[ClosedWindow]:
    agg = WindowAggregator(cluster=CLUSTER, broker=broker, window_s=AGENT_WINDOW_S)
    lines = (CAPTURES / capture).read_bytes().splitlines()
    return ingest_lines(lines, LineParser(), agg, Health()) + agg.close_all()


def captured(capture: str, broker: int, sampled_1_in: int = 1, shift_ms: int = 0) -> list[R.Record]:
    """The stage sketches and slow-request exemplars the agent sends for ``capture`` as
    ``broker``; ``sampled_1_in`` > 1: as if it had logged one request in that many."""
    out: list[R.Record] = []
    for w in agent_windows(capture, broker):
        scaled = w.scaled(sampled_1_in)
        out += [*scaled.sketches, *scaled.slow_requests]
    return [dataclasses.replace(r, ts_ms=r.ts_ms + shift_ms) for r in out]


def _first_ms(recs: list[R.Record], window_s: int) -> int:
    ms = window_s * 1000
    return min(r.ts_ms for r in recs) // ms * ms


def _same_minute() -> list[R.Record]:
    plain = captured("kafka-request.log", 1)
    kraft = captured("kafka-request-kraft.log", 2)
    shift = _first_ms(plain, CAPTURE_WINDOW_S) - _first_ms(kraft, CAPTURE_WINDOW_S)
    return plain + [dataclasses.replace(r, ts_ms=r.ts_ms + shift) for r in kraft]


@dataclasses.dataclass(frozen=True)
class Case:
    window_s: int
    records: Callable[[], list[R.Record]]


CASES: dict[str, Case] = {
    "kafka-request.log as one broker": Case(CAPTURE_WINDOW_S, lambda: captured("kafka-request.log", 1)),
    "kafka-request-kraft.log as one broker": Case(
        CAPTURE_WINDOW_S, lambda: captured("kafka-request-kraft.log", 1)
    ),
    "kafka-request.log as three brokers, two sampled 1 in 6 and 1 in 3": Case(
        CAPTURE_WINDOW_S,
        lambda: [
            *captured("kafka-request.log", 1),
            *captured("kafka-request.log", 2, sampled_1_in=6),
            *captured("kafka-request.log", 3, sampled_1_in=3),
        ],
    ),
    "both captures on one minute as two brokers": Case(CAPTURE_WINDOW_S, _same_minute),
    **{
        f"scenario: {name}": Case(SCENARIO_WINDOW_S, lambda recs=recs: list(recs))
        for name, recs in SCENARIOS.items()
    },
}


def placed(recs: list[R.Record], k: int, window_s: int) -> tuple[list[R.Record], int]:
    """Case ``k``'s records moved to start at ``T0 + k · SPAN_MS``, and that start."""
    base = T0 + k * SPAN_MS
    shift = base - _first_ms(recs, window_s)

    def move(r: R.Record) -> R.Record:
        changes: dict[str, int] = {"ts_ms": r.ts_ms + shift}
        if isinstance(r, R.PartitionSize):
            changes["newest_segment_ms"] = r.newest_segment_ms + shift
        return dataclasses.replace(r, **changes)

    return [move(r) for r in recs], base


def case_rows(data: Aggregates, base: int) -> dict[str, list[dict]]:
    """The rows of one case (its windows start at ``base``), windows relative to ``base``."""
    out: dict[str, list[dict]] = {}
    for name in ROW_SETS:
        rows = [
            dataclasses.asdict(r) | {"window_start_ms": r.window_start_ms - base}
            for r in getattr(data, name)
            if base <= r.window_start_ms < base + SPAN_MS
        ]
        out[name] = sorted(rows, key=lambda d: json.dumps(d, sort_keys=True))
    return out


def as_aggregates(rows: dict[str, list[dict]], window_s: int) -> Aggregates:
    """Rows of :func:`case_rows` (or of the fixture) as an Aggregates, for
    :func:`tests.aggregation.window_records.assert_same_aggregates`."""
    sets = {name: [ROW_TYPES[name](**r) for r in rows[name]] for name in ROW_SETS}
    return Aggregates(cluster=CLUSTER, window_s=window_s, **sets)


def load_golden() -> dict[str, dict[str, list[dict]]]:
    """Case name → row set → rows, as pinned (field order per row set in ``columns``)."""
    doc = json.loads(GOLDEN.read_text())
    cols: dict[str, list[str]] = doc["columns"]
    return {
        case: {name: [dict(zip(cols[name], row, strict=True)) for row in rows] for name, rows in sets.items()}
        for case, sets in doc["cases"].items()
    }


def dump_golden(cases: dict[str, dict[str, list[dict]]]) -> str:
    """One line per row, fields in ``columns`` order (JSON floats round-trip exactly)."""
    cols = {name: [f.name for f in dataclasses.fields(ROW_TYPES[name])] for name in ROW_SETS}
    lines = ["{", f'"columns": {json.dumps(cols)},', '"cases": {']
    for i, (case, sets) in enumerate(cases.items()):
        lines.append(f"{json.dumps(case)}: {{")
        for j, name in enumerate(ROW_SETS):
            rows = [json.dumps([r[c] for c in cols[name]]) for r in sets[name]]
            body = ",\n".join(rows)
            sep = "," if j < len(ROW_SETS) - 1 else ""
            lines.append(f"{json.dumps(name)}: [\n{body}\n]{sep}" if rows else f"{json.dumps(name)}: []{sep}")
        lines.append("}," if i < len(cases) - 1 else "}")
    lines += ["}", "}"]
    return "\n".join(lines) + "\n"


def spark_rows(spark, window_s: int, cases: dict[str, Case]) -> dict[str, dict[str, list[dict]]]:
    """Every case of one window size through the Spark path, in one job."""
    from spark_metrics.aggregate import aggregate, collect
    from tests.spark_metrics.conftest import raw_frame

    placed_cases = {name: placed(c.records(), k, window_s) for k, (name, c) in enumerate(cases.items())}
    raw = raw_frame(spark, [r for recs, _ in placed_cases.values() for r in recs])
    data = collect(aggregate(raw, window_s, cluster=CLUSTER), CLUSTER, window_s)
    return {name: case_rows(data, base) for name, (_, base) in placed_cases.items()}


def main() -> None:
    from spark_metrics.session import spark_session

    spark = spark_session("local[2]", app_name="linkwatch-golden", shuffle_partitions=2)
    try:
        out: dict[str, dict[str, list[dict]]] = {}
        for window_s in sorted({c.window_s for c in CASES.values()}):
            out |= spark_rows(spark, window_s, {n: c for n, c in CASES.items() if c.window_s == window_s})
    finally:
        spark.stop()
    GOLDEN.write_text(dump_golden({name: out[name] for name in CASES}))
    print(f"wrote {GOLDEN}: {sum(len(rows) for sets in out.values() for rows in sets.values())} rows")


if __name__ == "__main__":
    main()
