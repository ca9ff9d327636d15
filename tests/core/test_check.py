"""``linkwatch <component> check -c FILE``: the config validated, then what it names tried, one
✓/✗ line per probe naming the key; exit 0 only when every probe passed, 1 otherwise, 2 for a
config that does not validate. Real parts: a request-log file, an HTTP server on loopback for
Jolokia, a closed port for an unreachable cluster, and the session's 3-broker cluster."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cli.main import main
from linkwatch import preflight
from testbed.cluster import ClusterState
from tests.core.test_reach import closed_port

SECRET = "s3cr3t-never-shown"


@pytest.fixture
def jolokia() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"value": {}}')

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/jolokia"
    finally:
        server.shutdown()
        server.server_close()


def _lines(out: str) -> dict[str, str]:
    """key -> the ✓/✗ mark of its line."""
    got = {}
    for line in out.splitlines():
        if line[:2] in ("✓ ", "✗ ") and ": " in line:
            got[line[2:].split(": ", 1)[0]] = line[0]
    return got


def test_an_agent_whose_sources_are_there_passes(
    tmp_path: Path, jolokia: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "kafka-request.log"
    log.write_text("")
    (tmp_path / "logs").mkdir()
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "broker_id": 1,
                "request_log": {"path": str(log), "position_file": str(tmp_path / "pos" / "p")},
                "jmx": {"jolokia_url": jolokia},
                "log_dirs": {"paths": [str(tmp_path / "logs")]},
            }
        )
    )
    assert main(["agent", "check", "-c", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert _lines(out) == {
        str(cfg): "✓",
        "request_log.path": "✓",
        "request_log.position_file": "✓",
        "jmx.jolokia_url": "✓",
        "log_dirs.paths": "✓",
    }
    assert "all 4 checks passed" in out and "- kafka: not configured" in out


def test_an_agent_pointed_at_nothing_gets_a_line_per_mistake(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "broker_id": 1,
                "request_log": {"path": str(tmp_path / "nope" / "kafka-request.log")},
                "jmx": {"jolokia_url": f"http://127.0.0.1:{closed_port()}/jolokia"},
                "kafka": {
                    "enabled": True,
                    "bootstrap_servers": f"127.0.0.1:{port}",
                    "spool_dir": str(tmp_path / "spool"),
                    "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "PLAIN",
                    "sasl_username": "lw",
                    "sasl_password": SECRET,
                },
            }
        )
    )
    assert main(["agent", "check", "-c", str(cfg)]) == 1
    out = capsys.readouterr().out
    assert _lines(out) == {
        str(cfg): "✓",
        "request_log.path": "✗",
        "jmx.jolokia_url": "✗",
        "kafka.spool_dir": "✓",
        "kafka.bootstrap_servers": "✗",
        "kafka.topic": "✗",
    }
    assert "does not exist" in out and f"127.0.0.1:{port}" in out and "1 of 5 checks passed" in out
    assert SECRET not in out


def test_a_config_that_does_not_validate_is_exit_2_before_any_probe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "lag.yaml"
    cfg.write_text("kafka: {bootstrap_servers: 'a:1'}\npublish: {samples: maybe}\n")
    assert main(["lag", "check", "-c", str(cfg)]) == 2
    captured = capsys.readouterr()
    assert "publish.samples" in captured.err and "✓" not in captured.out


def test_a_probe_that_raises_is_a_line_not_a_traceback() -> None:
    def broken() -> preflight.Probe:
        raise RuntimeError("boom")

    lines = preflight.run([broken, lambda: preflight.Probe(True, "k", "fine")])
    assert [(p.ok, p.key) for p in lines] == [(False, "broken"), (True, "k")]
    assert "RuntimeError: boom" in lines[0].text


@pytest.mark.cluster
def test_every_component_checks_the_real_cluster_and_its_topics(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kafka.admin import NewTopic

    kafka = {"bootstrap_servers": cluster3.bootstrap}
    samples, findings = f"{topic_name}-samples", f"{topic_name}-findings"
    configs = {
        "lag": {"kafka": kafka, "publish": {"samples_topic": samples, "findings_topic": findings}},
        "probe": {"kafka": kafka, "samples_topic": samples, "topic": {"name": f"{topic_name}-probe"}},
        "analyze": {
            "kafka": kafka,
            "samples_topic": samples,
            "findings_topic": findings,
            "state_dir": str(tmp_path / "analyzer"),
        },
        "remediate": {"kafka": kafka, "findings_topic": findings, "state_dir": str(tmp_path / "rem")},
    }
    paths = {}
    for name, body in configs.items():
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(body))

    # The topics are not there yet: the cluster answers, each missing topic is a ✗ (the probe's
    # own topic is created by the probe: ✓, said so).
    for name, path in paths.items():
        assert main([name, "check", "-c", str(path)]) == 1, name
        out = capsys.readouterr().out
        marks = _lines(out)
        assert marks["kafka.bootstrap_servers"] == "✓" and "answers (3 brokers)" in out, (name, out)
        assert "✗" in marks.values() and "does not exist; `linkwatch topics`" in out, (name, out)
        if name == "probe":
            assert marks["topic.name"] == "✓" and "this process creates it" in out
    admin.create_topics([NewTopic(samples, 1, 1), NewTopic(findings, 1, 1)])
    for name, path in paths.items():
        assert main([name, "check", "-c", str(path)]) == 0, (name, capsys.readouterr().out)
        out = capsys.readouterr().out
        assert set(_lines(out).values()) == {"✓"}, out


@pytest.mark.cluster
def test_topics_creates_only_what_is_missing_and_never_changes_a_topic(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kafka.admin import NewTopic

    samples, findings = f"{topic_name}-samples", f"{topic_name}-findings"
    # The findings topic exists already, with a retention of its owner's choosing.
    admin.create_topics([NewTopic(findings, 1, 1, topic_configs={"retention.ms": "60000"})])
    cfg = tmp_path / "analyzer.yaml"  # any component's config: its kafka section and topic names
    cfg.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": cluster3.bootstrap},
                "samples_topic": samples,
                "findings_topic": findings,
                "window_s": 10,
            }
        )
    )
    assert main(["topics", "-c", str(cfg)]) == 1
    out = capsys.readouterr().out
    assert f"✗ {samples}: missing" in out and f"dry run: would create {samples}" in out
    assert f"~ {findings}: exists; differs: retention.ms 60000 (recommended 604800000)" in out
    assert samples not in admin.list_topics()  # a dry run creates nothing

    assert main(["topics", "-c", str(cfg), "--create"]) == 0
    assert f"created {samples}" in capsys.readouterr().out
    assert main(["topics", "-c", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert f"✓ {samples}: exists with the recommended settings" in out
    assert "retention.ms 60000" in out  # the existing topic was left as its owner set it
    [meta] = admin.describe_topics([samples])
    assert len(meta["partitions"]) == 6 and len(meta["partitions"][0]["replica_nodes"]) == 3
