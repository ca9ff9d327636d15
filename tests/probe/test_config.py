"""Config validated at load (one table of bad inputs, each message naming the key), the sample
config, the command's config check, the metrics rendering and the record schema's old readers."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from cli.main import main
from linkwatch import records
from linkwatch.config import load_config
from linkwatch.errors import ConfigError
from linkwatch.records import RecordError, StageSketch
from probe.config import ProbeConfig
from probe.ledger import ProbeLedger
from probe.metrics import ProbeMetrics
from probe.service import probe_records

SAMPLE = Path(__file__).resolve().parents[2] / "config" / "probe.sample.yaml"

BAD = [
    ("cluster: x\n", "bootstrap_servers: required"),
    ("bootstrap_servers: b\ninterval_ms: 0\n", "interval_ms=0"),
    (
        "bootstrap_servers: b\ndeadline_ms: 9000\nforget_after_ms: 5000\n",
        "forget_after_ms=5000: Value error, must be >= deadline_ms (9000)",
    ),
    ("bootstrap_servers: b\nacks: 2\n", "acks=2"),
    ("bootstrap_servers: b\ntopic:\n  name: 'a b'\n", "topic.name='a b'"),
    ("bootstrap_servers: b\ntopic:\n  replication_factor: 0\n", "topic.replication_factor=0"),
    ("bootstrap_servers: b\ntopic:\n  check_interval_s: 0\n", "topic.check_interval_s=0"),
    ("bootstrap_servers: b\nmax_pending: 0\n", "max_pending=0"),
    ("bootstrap_servers: b\nmetrics:\n  port: 70000\n", "metrics.port=70000"),
    ("bootstrap_servers: b\nintervall_ms: 5\n", "intervall_ms: unknown key"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[b[1] for b in BAD])
def test_bad_config_names_key_value_and_why(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path, ProbeConfig, env_prefix="LINKWATCH_PROBE_")
    assert message in str(e.value)


def test_sample_config_is_valid_and_shows_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LINKWATCH_PROBE_TOPIC__REPLICATION_FACTOR", "3")
    cfg = load_config(SAMPLE, ProbeConfig, env_prefix="LINKWATCH_PROBE_")
    # The sample names the cluster every sample shares (tests/test_samples.py), not the default.
    defaults = ProbeConfig(
        kafka={"bootstrap_servers": "127.0.0.1:9092"}, instance=cfg.instance, cluster=cfg.cluster
    )
    assert cfg.topic.replication_factor == 3
    assert cfg.model_copy(update={"topic": defaults.topic}) == defaults


def test_command_checks_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("bootstrap_servers: b\nwindow_s: -1\n")
    assert main(["probe", "check", "-c", str(bad)]) == 2
    assert "window_s=-1" in capsys.readouterr().err
    assert main(["probe", "check", "-c", str(SAMPLE), "--config-only", "--show"]) == 0
    assert '"deadline_ms": 5000' in capsys.readouterr().out


def _windows():
    ledger = ProbeLedger(1.0, 10.0, 100)
    for seq, broker, e2e_s in [(1, 1, 0.01), (2, 2, 0.4), (3, 2, 3.0)]:
        ledger.sent(seq, broker, 0.0)
        ledger.acked(seq, e2e_s / 2)
        ledger.read_back(seq, e2e_s)
    return ledger, ledger.take_windows()


def test_metrics_are_per_broker_from_the_last_window() -> None:
    ledger, windows = _windows()
    m = ProbeMetrics("c1")
    registry = CollectorRegistry()
    registry.register(m)
    m.update(windows, ledger.dropped, ledger.pending)
    text = generate_latest(registry).decode()
    assert 'linkwatch_probe_availability_ratio{broker="1",cluster="c1"} 1.0' in text
    assert 'linkwatch_probe_availability_ratio{broker="2",cluster="c1"} 0.5' in text
    assert 'linkwatch_probe_unavailable_total{broker="2",cluster="c1",reason="deadline"} 1.0' in text
    line = next(
        x
        for x in text.splitlines()
        if x.startswith('linkwatch_probe_end_to_end_latency_seconds{broker="2"') and 'quantile="1.0"' in x
    )
    assert float(line.split()[-1]) == pytest.approx(3.0, rel=0.01)  # no clamp
    assert "partition" not in text
    m.update({}, ledger.dropped, 0)  # a window without broker 2: its gauges go, counters stay
    text = generate_latest(registry).decode()
    assert "linkwatch_probe_availability_ratio{" not in text
    assert 'linkwatch_probe_sent_total{broker="2",cluster="c1"} 2.0' in text


def test_probe_records_round_trip_and_old_readers_skip_them(monkeypatch: pytest.MonkeyPatch) -> None:
    _, windows = _windows()
    cfg = ProbeConfig(bootstrap_servers="b", cluster="c1", instance="p1")
    recs = probe_records(windows, cfg, 1_700_000_000_000)
    assert [(r.broker, r.sent, r.ok, r.unavailable) for r in recs] == [
        (1, 1, 1, {}),
        (2, 2, 1, {"deadline": 1}),
    ]
    assert records.decode(recs[1].to_json()) == recs[1]
    assert recs[0].to_dict()["v"] == 1  # a new kind does not bump the version
    # A reader from before the probe (no such kind) skips it as unknown_kind, and still reads the rest.
    monkeypatch.setattr(records, "KINDS", {k: v for k, v in records.KINDS.items() if k != "probe"})
    with pytest.raises(RecordError) as e:
        records.decode(recs[0].to_json())
    assert e.value.reason == "unknown_kind"
    stage = StageSketch(
        cluster="c1", source="b1", ts_ms=1, broker=1, request="Produce", stage="total", window_s=10, sketch={}
    )
    assert records.decode(stage.to_json()) == stage
