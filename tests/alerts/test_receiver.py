"""``linkwatch alerts serve`` over real HTTP on loopback: auth, validation, de-duplication,
audit, and the built-in hooks (exec gets alert text safely, webhook retries are bounded)."""

from __future__ import annotations

import copy
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alerts.config import ENV_PREFIX, ReceiverConfig
from alerts.hooks import NOTIFIERS_GROUP, AlertEvent, Hook, HookResult, available_hooks, load_hook
from alerts.hooks.exec import ExecNotifier
from alerts.hooks.memory import MemoryNotifier
from alerts.hooks.webhook import WebhookNotifier
from alerts.receiver import LINGER_S, AlertReceiver
from linkwatch.config import load_config
from linkwatch.errors import ConfigError

TOKEN = "s3cret-token"


def message(*alerts: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{cluster="c1"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "linkwatch",
        "groupLabels": {"cluster": "c1"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://127.0.0.1:9093",
        "alerts": list(alerts),
    }


def alert(
    broker: str = "2", status: str = "firing", starts: str = "2026-11-21T05:00:00.000Z", **ann: str
) -> dict:
    return {
        "status": status,
        "labels": {
            "alertname": "LinkwatchSlowBroker",
            "cluster": "c1",
            "broker": broker,
            "request": "Produce",
        },
        "annotations": {"summary": f"Broker {broker} is slow", "stage": "local", **ann},
        "startsAt": starts,
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-11-21T05:10:00.000Z",
        "generatorURL": "http://127.0.0.1:9090/graph",
        "fingerprint": f"fp{broker}",
    }


def post(
    url: str,
    body: bytes | dict,
    token: str | None = TOKEN,
    ctype: str = "application/json",
    auth: str | None = None,
):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": ctype}
    if auth is not None:
        headers["Authorization"] = auth
    elif token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class Exploding(Hook):
    """A hook with a bug: every call raises."""

    name = "exploding"

    def handle(self, event: AlertEvent) -> HookResult:
        raise RuntimeError("boom")


@pytest.fixture
def memory() -> MemoryNotifier:
    return MemoryNotifier({"max_events": 100})


@pytest.fixture
def receiver(tmp_path: Path, memory: MemoryNotifier) -> Iterator[AlertReceiver]:
    cfg = ReceiverConfig(port=0, token=TOKEN, audit_log=tmp_path / "audit.jsonl", max_body_bytes=64 * 1024)
    with AlertReceiver(cfg, hooks=[Exploding(), memory]) as r:
        yield r


@pytest.mark.parametrize(
    "auth",
    [None, "Bearer wrong", f"Basic {TOKEN}", "Bearer ", f"Bearer {TOKEN}x", f"bearer{TOKEN}"],
    ids=["missing", "wrong", "basic", "empty", "suffix", "no-space"],
)
def test_bad_token_is_401_and_nothing_is_audited(receiver: AlertReceiver, auth: str | None) -> None:
    status, answer = post(receiver.url, message(alert()), token=None, auth=auth or "")
    assert (status, answer["error"]) == (401, "unauthorized")
    assert receiver.audit.read() == []


BIG = json.dumps(message(*[alert(broker=str(i)) for i in range(1001)])).encode()
MALFORMED: list[tuple[str, bytes | dict, str, int, str]] = [
    # (id, body, content type, status, error reason)
    ("not-json", b"{nope", "application/json", 400, "not_json"),
    ("not-utf8", b"\xff\xfe\x00", "application/json", 400, "not_json"),
    ("top-level-list", b"[]", "application/json", 400, "not_object"),
    ("version-3", {**message(alert()), "version": "3"}, "application/json", 400, "bad_version"),
    (
        "no-alerts",
        {k: v for k, v in message(alert()).items() if k != "alerts"},
        "application/json",
        400,
        "missing_field",
    ),
    ("alerts-not-list", {**message(), "alerts": {"a": 1}}, "application/json", 400, "bad_type"),
    ("alert-not-object", message("x"), "application/json", 400, "bad_type"),  # type: ignore[arg-type]
    (
        "no-labels",
        message({k: v for k, v in alert().items() if k != "labels"}),
        "application/json",
        400,
        "missing_field",
    ),
    (
        "label-not-string",
        message({**alert(), "labels": {"alertname": "A", "broker": 2}}),
        "application/json",
        400,
        "bad_type",
    ),
    (
        "no-alertname",
        message({**alert(), "labels": {"broker": "2"}}),
        "application/json",
        400,
        "missing_field",
    ),
    ("bad-status", message({**alert(), "status": "exploded"}), "application/json", 400, "bad_status"),
    ("bad-top-status", {**message(alert()), "status": 3}, "application/json", 400, "bad_type"),
    ("bad-startsAt", message({**alert(), "startsAt": "yesterday"}), "application/json", 400, "bad_time"),
    (
        "no-startsAt",
        message({k: v for k, v in alert().items() if k != "startsAt"}),
        "application/json",
        400,
        "missing_field",
    ),
    (
        "too-many-labels",
        message({**alert(), "labels": {f"l{i}": "v" for i in range(65)} | {"alertname": "A"}}),
        "application/json",
        400,
        "too_many_labels",
    ),
    ("nested-list", b"[" * 20000 + b"]" * 20000, "application/json", 400, "too_deep"),
    ("nested-object", b'{"a":' * 9000 + b"1" + b"}" * 9000, "application/json", 400, "too_deep"),
    ("nested-alerts", {**message(), "alerts": [[[[[]]]]] * 2}, "application/json", 400, "bad_type"),
    ("wrong-content-type", message(alert()), "text/plain", 415, "not_json"),
    ("too-large", BIG, "application/json", 413, "too_large"),
]


@pytest.mark.parametrize("case", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_payloads_get_clear_4xx(receiver: AlertReceiver, memory: MemoryNotifier, case) -> None:
    _id, body, ctype, status, reason = case
    got_status, answer = post(receiver.url, body, ctype=ctype)
    assert (got_status, answer.get("error")) == (status, reason)
    assert answer.get("detail")
    assert receiver.audit.read() == []
    assert list(memory.events) == []


def test_unknown_path_and_health(receiver: AlertReceiver) -> None:
    assert post(receiver.url.replace("/alerts", "/other"), message(alert()))[0] == 404
    with urllib.request.urlopen(receiver.url.replace("/alerts", "/healthz"), timeout=5) as r:
        assert json.loads(r.read()) == {"status": "ok"}


def test_valid_message_is_audited_and_reaches_hooks_despite_a_failing_hook(
    receiver: AlertReceiver, memory: MemoryNotifier
) -> None:
    status, answer = post(receiver.url, message(alert("2"), alert("3")))
    assert (status, answer) == (200, {"accepted": 2, "duplicates": 0})
    events = memory.wait_for(2, timeout_s=5)
    assert [(e.labels["broker"], e.annotations["stage"], e.status) for e in events] == [
        ("2", "local", "firing"),
        ("3", "local", "firing"),
    ]
    audit = receiver.audit.read()
    alerts = [r for r in audit if r["event"] == "alert"]
    assert [(r["labels"]["broker"], r["duplicate"], r["remote"]) for r in alerts] == [
        ("2", False, "127.0.0.1"),
        ("3", False, "127.0.0.1"),
    ]
    _wait(lambda: len([r for r in receiver.audit.read() if r["event"] == "hook"]) == 4)
    hooks = [(r["hook"], r["result"]) for r in receiver.audit.read() if r["event"] == "hook"]
    assert sorted(hooks) == sorted([("exploding", "failed"), ("memory", "done")] * 2)
    assert receiver.stats["hook_failed_exploding"] == 2


def test_duplicates_are_audited_but_not_handed_on(receiver: AlertReceiver, memory: MemoryNotifier) -> None:
    assert post(receiver.url, message(alert("2")))[1] == {"accepted": 1, "duplicates": 0}
    assert post(receiver.url, message(alert("2")))[1] == {"accepted": 0, "duplicates": 1}
    # the same alert resolved, and firing again with a new start, are new events
    resolved = message(alert("2", status="resolved"), status="resolved")
    assert post(receiver.url, resolved)[1] == {"accepted": 1, "duplicates": 0}
    again = message(alert("2", starts="2026-11-21T06:00:00.000Z"))
    assert post(receiver.url, again)[1] == {"accepted": 1, "duplicates": 0}
    events = memory.wait_for(3, timeout_s=5)
    assert [(e.status, e.starts_at[11:16]) for e in events] == [
        ("firing", "05:00"),
        ("resolved", "05:00"),
        ("firing", "06:00"),
    ]
    assert [r["duplicate"] for r in receiver.audit.read() if r["event"] == "alert"] == [
        False,
        True,
        False,
        False,
    ]


def test_a_repeat_inside_one_message_is_a_duplicate(receiver: AlertReceiver, memory: MemoryNotifier) -> None:
    assert post(receiver.url, message(alert("2"), alert("2"), alert("3")))[1] == {
        "accepted": 2,
        "duplicates": 1,
    }
    assert [e.labels["broker"] for e in memory.wait_for(2, timeout_s=5)] == ["2", "3"]


def test_dedup_cache_is_bounded(tmp_path: Path, memory: MemoryNotifier) -> None:
    cfg = ReceiverConfig(port=0, token=TOKEN, audit_log=tmp_path / "a.jsonl", dedup_entries=2)
    with AlertReceiver(cfg, hooks=[memory]) as r:
        for b in ("1", "2", "3"):
            assert post(r.url, message(alert(b)))[1]["accepted"] == 1
        assert len(r.dedup) == 2
        assert post(r.url, message(alert("3")))[1]["accepted"] == 0  # still remembered
        assert post(r.url, message(alert("1")))[1]["accepted"] == 1  # the oldest was forgotten


EVIL = "x'; touch {marker}; echo $(touch {marker}) `touch {marker}` | && > {marker} $HOME \"\n"

SCRIPT = """
import json, os, sys
event = json.load(sys.stdin)
env = {k: v for k, v in os.environ.items() if k.startswith("LINKWATCH_ALERT")}
json.dump({"argv": sys.argv[1:], "env": env, "stdin": event}, open(sys.argv[1], "w"))
"""


def test_exec_hook_gets_alert_text_as_data_never_as_shell(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = EVIL.format(marker=marker)
    script = tmp_path / "hook.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out.json"
    hook = ExecNotifier({"argv": [sys.executable, str(script), str(out), "--fixed"]})
    cfg = ReceiverConfig(port=0, token=TOKEN, audit_log=tmp_path / "a.jsonl")
    with AlertReceiver(cfg, hooks=[hook]) as r:
        body = message({**alert("2", summary=evil), "labels": {**alert()["labels"], "topic": evil}})
        assert post(r.url, body)[0] == 200
        _wait(lambda: out.exists())
    got = json.loads(out.read_text())
    assert got["argv"] == [str(out), "--fixed"]
    assert got["env"]["LINKWATCH_ALERT_ANNOTATION_SUMMARY"] == evil
    assert got["env"]["LINKWATCH_ALERT_LABEL_TOPIC"] == evil
    assert got["env"]["LINKWATCH_ALERT_LABEL_BROKER"] == "2"
    assert got["env"]["LINKWATCH_ALERT_NAME"] == "LinkwatchSlowBroker"
    assert got["stdin"]["labels"]["topic"] == evil
    assert not marker.exists()


def test_exec_hook_failure_and_bad_options(tmp_path: Path) -> None:
    event = AlertEvent("firing", {"alertname": "A"}, {}, "2026-11-21T05:00:00Z", "", "fp")
    assert (
        ExecNotifier({"argv": [sys.executable, "-c", "raise SystemExit(3)"]}).handle(event)
        is HookResult.FAILED
    )
    assert (
        ExecNotifier({"argv": [sys.executable, "-c", "import time; time.sleep(5)"], "timeout_s": 0.3}).handle(
            event
        )
        is HookResult.FAILED
    )
    for bad in ({}, {"argv": "echo hi"}, {"argv": []}, {"argv": ["ok", 3]}, {"argv": ["x"], "timeout_s": 0}):
        with pytest.raises(ConfigError):
            ExecNotifier(bad)


class _Target(BaseHTTPRequestHandler):
    """A real loopback HTTP endpoint that fails its first ``fail_first`` POSTs with 500."""

    fail_first = 0
    bodies: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        status = 500 if len(type(self).bodies) <= type(self).fail_first else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("fail_first", "retries", "result", "posts"),
    [(0, 2, "done", 1), (2, 2, "done", 3), (9, 2, "failed", 3), (9, 0, "failed", 1)],
)
def test_webhook_hook_retries_are_bounded(fail_first: int, retries: int, result: str, posts: int) -> None:
    handler = type("T", (_Target,), {"fail_first": fail_first, "bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        hook = WebhookNotifier({"url": url, "retries": retries, "backoff_s": 0.01, "timeout_s": 2})
        event = AlertEvent(
            "firing", {"alertname": "A", "broker": "1"}, {"stage": "send"}, "2026-11-21T05:00:00Z", "", "fp"
        )
        assert hook.handle(event).value == result
        assert len(handler.bodies) == posts
        assert handler.bodies[0]["labels"] == {"alertname": "A", "broker": "1"}
    finally:
        server.shutdown()
        server.server_close()


def test_every_declared_hook_loads_and_unknown_names_fail() -> None:
    declared = available_hooks()
    assert set(declared) >= {"log", "webhook", "exec", "memory"}
    options = {"webhook": {"url": "http://127.0.0.1:1/x"}, "exec": {"argv": ["true"]}}
    for name in declared:
        assert load_hook(name, options.get(name)).name == name
    with pytest.raises(ConfigError, match=NOTIFIERS_GROUP):
        load_hook("pagerduty-typo")


def test_receiver_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="token"):
        AlertReceiver(ReceiverConfig(port=0, audit_log=tmp_path / "a.jsonl"))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert ReceiverConfig(token_file=token_file).resolved_token() == TOKEN.encode()


def test_copy_of_message_is_unchanged_by_parsing(receiver: AlertReceiver) -> None:
    body = message(alert("2"))
    before = copy.deepcopy(body)
    post(receiver.url, body)
    assert body == before


def _wait(cond, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


# --- faults found by trying bad input (issue 18); each row failed on the http.server receiver ---


def raw_request(
    url: str, data: bytes, timeout_s: float = 10.0, pause_s: float = 0.0, burst: int = 0
) -> tuple[int, float]:
    """Send ``data`` as it is on a fresh connection (the first ``burst`` bytes at once, then
    one byte every ``pause_s`` when set) and return (HTTP status of the answer, seconds until
    it came); status 0 when the server closed without answering."""
    parts = urllib.parse.urlsplit(url)
    started = time.monotonic()
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s) as s:
        try:
            if pause_s:
                s.sendall(data[:burst])
                for i in range(burst, len(data)):
                    s.sendall(data[i : i + 1])
                    time.sleep(pause_s)
            else:
                s.sendall(data)
        except OSError:
            pass  # the server answered early and closed; read its answer below
        got = b""
        try:
            while b"\r\n" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except ConnectionResetError:
            pass
    elapsed = time.monotonic() - started
    if not got.startswith(b"HTTP/1."):
        return 0, elapsed
    return int(got.split(b" ", 2)[1]), elapsed


def head(url: str, length: str | None, extra: str = "") -> bytes:
    path = urllib.parse.urlsplit(url).path
    lines = [f"POST {path} HTTP/1.1", "Host: x", f"Authorization: Bearer {TOKEN}"]
    lines += ["Content-Type: application/json"] + ([f"Content-Length: {length}"] if length else [])
    text = "\r\n".join(lines) + "\r\n" + extra + "\r\n"
    try:
        return text.encode("latin-1")  # what http.server decoded headers with
    except UnicodeEncodeError:
        return text.encode()


CONTENT_LENGTHS = [
    # (id, Content-Length value, extra header lines, expected status)
    ("superscript-digit", "\u00b2", "", 400),  # str.isdigit() is true, int() fails
    ("arabic-digits", "\u0661\u0662", "", 400),
    ("negative", "-1", "", 400),
    ("hex", "0x10", "", 400),
    ("float", "1e3", "", 400),
    ("over-the-limit", "9" * 12, "", 413),
    ("overflows-64-bits", "9" * 40, "", 400),
    ("two-values", "5, 6", "", 400),
    ("conflicting-headers", "5", "Content-Length: 6\r\n", 400),
    ("missing", None, "", 411),
]


@pytest.mark.parametrize("case", CONTENT_LENGTHS, ids=[c[0] for c in CONTENT_LENGTHS])
def test_any_content_length_gets_an_answer(receiver: AlertReceiver, case) -> None:
    _id, length, extra, status = case
    assert raw_request(receiver.url, head(receiver.url, length, extra))[0] == status
    assert receiver.stats["rejected_bad_http"] == (1 if status == 400 else 0)
    assert post(receiver.url, message(alert()))[0] == 200  # and the server still serves


def test_a_failed_audit_write_is_retried_not_taken_as_a_duplicate(
    tmp_path: Path, memory: MemoryNotifier
) -> None:
    audit = tmp_path / "audit.jsonl"
    cfg = ReceiverConfig(port=0, token=TOKEN, audit_log=audit)
    with AlertReceiver(cfg, hooks=[memory]) as r:
        audit.mkdir()  # the audit log cannot be written once (IsADirectoryError)
        assert post(r.url, message(alert("2")))[:1] == (503,)
        audit.rmdir()
        assert post(r.url, message(alert("2")))[1] == {"accepted": 1, "duplicates": 0}
        assert [e.labels["broker"] for e in memory.wait_for(1, timeout_s=5)] == ["2"]
        assert r.stats["rejected_audit_failed"] == 1


def test_trickling_clients_get_408_and_never_starve_real_alerts(
    tmp_path: Path, memory: MemoryNotifier
) -> None:
    cfg = ReceiverConfig(
        port=0, token=TOKEN, audit_log=tmp_path / "a.jsonl", max_concurrent_requests=2, request_timeout_s=1.5
    )
    with AlertReceiver(cfg, hooks=[memory]) as r:
        # Six clients announce 400 bytes and send one every 0.1 s: 40 s if nothing stopped them.
        headers = head(r.url, "400")
        slow = headers + b" " * 400
        results: list[tuple[int, float]] = []
        threads = [
            threading.Thread(
                target=lambda: results.append(raw_request(r.url, slow, pause_s=0.1, burst=len(headers)))
            )
            for _ in range(6)
        ]
        for t in threads:
            t.start()
        time.sleep(0.5)  # all six are in their body now
        started = time.monotonic()
        assert post(r.url, message(alert("2")))[1] == {"accepted": 1, "duplicates": 0}
        assert time.monotonic() - started < 1.0
        for t in threads:
            t.join(15)
        assert sorted(s for s, _ in results) == [408] * 6
        # the deadline, then the client's next byte fails once the rest was drained (LINGER_S)
        assert max(e for _, e in results) < 1.5 + LINGER_S + 1.0


def test_slow_headers_are_cut_off_by_the_deadline(tmp_path: Path) -> None:
    cfg = ReceiverConfig(port=0, token=TOKEN, audit_log=tmp_path / "a.jsonl", request_timeout_s=1.0)
    with AlertReceiver(cfg, hooks=[]) as r:
        status, elapsed = raw_request(r.url, head(r.url, "10") * 5, pause_s=0.05)  # ~12 s of headers
        assert status == 0 and elapsed < 4.0  # closed (nothing to answer to) well before


def test_connections_over_the_limit_get_503_and_others_go_on(tmp_path: Path, memory: MemoryNotifier) -> None:
    cfg = ReceiverConfig(port=0, token=TOKEN, audit_log=tmp_path / "a.jsonl", max_connections=3)
    with AlertReceiver(cfg, hooks=[memory]) as r:
        parts = urllib.parse.urlsplit(r.url)
        idle = [socket.create_connection((parts.hostname, parts.port), timeout=5) for _ in range(3)]
        try:
            _wait(lambda: r.stats["rejected_connections"] == 0 and _open(r) == 3)
            assert post(r.url, message(alert("2")))[1]["error"] == "busy"
        finally:
            for s in idle:
                s.close()
        _wait(lambda: _open(r) == 0)
        assert post(r.url, message(alert("2")))[1] == {"accepted": 1, "duplicates": 0}


def _open(r: AlertReceiver) -> int:
    assert r._runner is not None and r._runner.server is not None
    return len(r._runner.server.connections)


@pytest.mark.parametrize(
    "token", ["s3cret #x", "'quoted'", '"dq"', "12345", "0o17", "true", "~", "a: b", "[x]", " pad "]
)
def test_token_from_the_environment_is_taken_verbatim(monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    monkeypatch.setenv("LINKWATCH_ALERTS_TOKEN", token)
    cfg = load_config(None, ReceiverConfig, ENV_PREFIX)
    assert cfg.resolved_token() == token.encode()


def test_a_bad_token_value_is_never_printed(tmp_path: Path) -> None:
    path = tmp_path / "alerts.yml"
    path.write_text("token: [hunter2-secret]\nport: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, ReceiverConfig, ENV_PREFIX)
    assert "token" in str(info.value)
    assert "hunter2" not in str(info.value)


# --- property: any request, complete or not, gets an answer and never holds up a real alert ---

_header_text = st.text(
    st.characters(min_codepoint=32, max_codepoint=255, exclude_characters="\x7f"), max_size=20
)
_bodies = (
    st.binary(max_size=600)
    | st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=15,
    ).map(lambda v: json.dumps(v).encode())
    | st.builds(
        lambda m, k, v: json.dumps({**m, k: v}).encode(),
        st.just(message(alert("9"))),
        st.sampled_from(["version", "alerts", "status", "receiver", "groupKey"]),
        st.none() | st.integers() | st.text(max_size=10) | st.lists(st.integers(), max_size=3),
    )
)


@st.composite
def hostile_requests(draw: st.DrawFn) -> tuple[bytes, bool]:
    """(bytes to send, whether they form one complete request the server must answer)."""
    body = draw(_bodies)
    length = draw(st.sampled_from(["right", "none", "any"]))
    lines = [
        draw(
            st.sampled_from(
                ["POST /alerts HTTP/1.1", "GET /alerts HTTP/1.1", "POST /x HTTP/1.1", "PUT /alerts HTTP/1.0"]
            )
        ),
        "Host: 127.0.0.1",
        draw(st.sampled_from([f"Authorization: Bearer {TOKEN}", "Authorization: Bearer x", "X-A: b"])),
        "Content-Type: " + draw(st.sampled_from(["application/json", "text/plain"]) | _header_text),
    ]
    lines += [f"X-{i}: {draw(_header_text)}" for i in range(draw(st.integers(0, 2)))]
    if length == "right":
        lines.append(f"Content-Length: {len(body)}")
    elif length == "any":
        lines.append(f"Content-Length: {draw(_header_text)}")
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    complete = length == "right"
    cut = draw(st.none() | st.integers(1, len(data)))  # stop sending part-way, keep the connection
    if cut is not None and cut < len(data):
        return data[:cut], False
    return data, complete


def test_any_request_gets_an_answer_and_never_blocks_a_real_alert(
    tmp_path: Path, memory: MemoryNotifier
) -> None:
    cfg = ReceiverConfig(
        port=0, token=TOKEN, audit_log=tmp_path / "a.jsonl", request_timeout_s=0.5, max_body_bytes=1024
    )
    real = iter(range(10**6))
    with AlertReceiver(cfg, hooks=[memory]) as r:

        @settings(
            max_examples=60,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(request=hostile_requests())
        def check(request: tuple[bytes, bool]) -> None:
            data, complete = request
            got: list[tuple[int, float]] = []
            hostile = threading.Thread(target=lambda: got.append(raw_request(r.url, data, timeout_s=10)))
            hostile.start()
            started = time.monotonic()
            n = next(real)
            assert post(r.url, message(alert(f"real-{n}")))[1] == {"accepted": 1, "duplicates": 0}
            assert time.monotonic() - started < 1.0
            hostile.join(10)
            status, elapsed = got[0]
            # A complete request is answered; an incomplete one is answered (408) or closed,
            # within the deadline for the headers and the one for the body.
            if complete:
                assert 200 <= status < 600
            assert elapsed < 2 * cfg.request_timeout_s + LINGER_S + 1.0

        check()
        assert r.stats["errors"] == 0  # no request reached the catch-all (a bug)


@pytest.mark.parametrize(
    ("text", "env", "code", "message"),
    [
        ("audit_log: {tmp}\n", {"LINKWATCH_ALERTS_TOKEN": TOKEN}, 2, "audit_log="),
        ("audit_log: ''\n", {"LINKWATCH_ALERTS_TOKEN": TOKEN}, 2, "must not be empty"),
        ("token_file: {tmp}\n", {}, 2, "token_file="),
        ("port: 1\n", {}, 2, "token: required"),
        ("port: 1\n", {"LINKWATCH_ALERTS_TOKEN": "12345 #x"}, 0, "ok (listen 127.0.0.1:1/alerts)"),
    ],
)
def test_serve_check_validates_paths_and_the_token(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
    env: dict[str, str],
    code: int,
    message: str,
) -> None:
    from cli.main import main

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "alerts.yml"
    path.write_text(text.replace("{tmp}", str(tmp_path)))
    assert main(["alerts", "serve", "--config", str(path), "--check"]) == code
    out = capsys.readouterr()
    assert message in (out.out + out.err)
    assert "12345" not in out.out + out.err


def test_the_example_config_loads_with_every_limit() -> None:
    example = Path(__file__).parents[2] / "config" / "alerts.example.yml"
    cfg = load_config(example, ReceiverConfig, ENV_PREFIX)
    limits = (cfg.request_timeout_s, cfg.max_concurrent_requests, cfg.max_connections, cfg.backlog)
    assert limits == (10, 16, 128, 128)
    assert cfg == ReceiverConfig(token_file=cfg.token_file, audit_log=cfg.audit_log)  # the defaults


def test_a_hook_that_fails_to_import_stops_start_up_with_its_name(monkeypatch) -> None:
    """A broken third-party hook is a ConfigError naming it, not a traceback."""
    from importlib.metadata import EntryPoint

    from linkwatch import plugins

    broken = EntryPoint(name="broken", value="no_such_module_anywhere:Hook", group=NOTIFIERS_GROUP)
    monkeypatch.setattr(plugins, "available", lambda group: {"broken": broken})
    with pytest.raises(ConfigError, match=r"hooks\.broken") as e:
        load_hook("broken")
    assert "failed to load" in str(e.value)
