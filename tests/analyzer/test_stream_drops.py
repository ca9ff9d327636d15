"""What the samples stream discarded, as the service exports it (no Spark session: the progress
events are built from the JSON Spark reports them in), and the event-time settings' checks."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError
from pyspark.sql.streaming.listener import StreamingQueryProgress

from analyzer.service import AnalysisService, AnalyzerConfig, AnalyzerMetricsConfig
from spark_metrics.streaming import ARCHIVE_QUERY, DROP_REASONS, DROPS_OBSERVATION, WINDOW_QUERY

QUERY_ID = str(uuid.uuid4())


def progress(
    batch: int, drops: dict[str, int], late: int = 0, name: str = ARCHIVE_QUERY
) -> StreamingQueryProgress:
    """A progress event as Spark sends it for one micro-batch of the archive query."""
    observed = {DROPS_OBSERVATION: {r: drops.get(r, 0) for r in DROP_REASONS}} if drops is not None else {}
    return StreamingQueryProgress.fromJson(
        {
            "id": QUERY_ID,
            "runId": str(uuid.uuid4()),
            "name": name,
            "timestamp": "2026-11-28T10:00:00.000Z",
            "batchId": batch,
            "batchDuration": 100,
            "stateOperators": [
                {
                    "operatorName": "dedupeWithinWatermark",
                    "numRowsTotal": 10,
                    "numRowsUpdated": 1,
                    "numRowsRemoved": 0,
                    "allUpdatesTimeMs": 1,
                    "allRemovalsTimeMs": 1,
                    "commitTimeMs": 1,
                    "memoryUsedBytes": 100,
                    "numRowsDroppedByWatermark": late,
                    "numShufflePartitions": 2,
                    "numStateStoreInstances": 2,
                    "customMetrics": {},
                }
            ],
            "sources": [],
            "sink": {"description": "parquet", "numOutputRows": 1, "metrics": {}},
            "observedMetrics": observed,
        }
    )


def dropped(service: AnalysisService) -> dict[str, float]:
    reg = service.metrics.registry
    return {
        r: reg.get_sample_value("linkwatch_analyzer_stream_dropped_total", {"reason": r})
        for r in (*DROP_REASONS, "late")
    }


def test_each_batch_is_counted_once_by_reason_and_other_queries_are_not(tmp_path: Path) -> None:
    service = AnalysisService(
        AnalyzerConfig(state_dir=tmp_path, metrics=AnalyzerMetricsConfig(enabled=False)), sinks=[]
    )
    assert set(dropped(service).values()) == {0.0}, "every reason is exported from the start"
    events = [
        progress(0, {"too_new": 1, "not_json": 2}),
        progress(1, {"tombstone": 1}, late=3),
        progress(1, {"tombstone": 1}, late=3),  # the same batch reported again
        progress(0, {"too_new": 50}, name=WINDOW_QUERY),  # the window query re-reads: not counted
        progress(2, {}),
    ]
    for event in events:
        service.stream_drops.add_progress(event)
    want = dict.fromkeys((*DROP_REASONS, "late"), 0.0) | {
        "too_new": 1.0,
        "not_json": 2.0,
        "tombstone": 1.0,
        "late": 3.0,
    }
    assert dropped(service) == want


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"watermark": "20 seconds"},
            "max_event_lead '30 seconds' must be shorter than watermark '20 seconds'",
        ),
        (
            {"max_event_lead": "3 minutes"},
            "max_event_lead '3 minutes' must be shorter than watermark '2 minutes'",
        ),
        ({"max_event_age": "a while"}, "max_event_age"),
        ({"max_record_bytes": 10}, "max_record_bytes"),
    ],
)
def test_event_time_settings_are_checked_at_load(settings: dict, message: str) -> None:
    with pytest.raises(ValidationError) as err:
        AnalyzerConfig.model_validate(settings)
    assert message in str(err.value)


def test_the_default_bounds() -> None:
    bounds = AnalyzerConfig().event_time_bounds
    assert (bounds.max_age_ms, bounds.max_lead_ms) == (86_400_000, 30_000)


def _checkpoint(root: Path, batches: dict[int, int]) -> Path:
    """A checkpoint's ``offsets/`` as Spark writes it: per batch a version line, the batch's
    metadata (its watermark among it) and one line per source."""
    (root / "offsets").mkdir(parents=True)
    for batch, mark in batches.items():
        meta = json.dumps({"batchWatermarkMs": mark, "batchTimestampMs": 1764325200000, "conf": {}})
        (root / "offsets" / str(batch)).write_text(f'v1\n{meta}\n{{"linkwatch.samples":{{"0":12}}}}\n')
    return root


def test_a_checkpoint_resuming_with_a_future_watermark_is_reported(tmp_path: Path, caplog) -> None:
    from spark_metrics.streaming import checkpoint_watermark_ms

    now_ms = 1_764_325_200_000
    assert checkpoint_watermark_ms(tmp_path / "none") is None
    cp = _checkpoint(tmp_path / "cp", {0: 0, 1: now_ms - 60_000, 12: 4_070_908_680_000})
    assert checkpoint_watermark_ms(cp) == 4_070_908_680_000  # the newest batch's, not the file order's
    cfg = AnalyzerConfig(state_dir=tmp_path, metrics=AnalyzerMetricsConfig(enabled=False))
    service = AnalysisService(cfg, sinks=[], clock=lambda: now_ms / 1000)
    service._check_checkpoint(cp)
    assert "resumes with a watermark" in caplog.text and str(cp) in caplog.text
    caplog.clear()
    service._check_checkpoint(_checkpoint(tmp_path / "fine", {3: now_ms - 120_000}))
    assert caplog.text == ""
