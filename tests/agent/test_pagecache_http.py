"""``GET /page-cache`` on a real agent's HTTP server: answers, bad input, bounds."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from agent.config import AgentConfig
from agent.runner import Agent
from linkwatch.pagecache import PAGE
from testbed.faults import evict_page_cache


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    """A real agent (HTTP server on a free loopback port) over two fabricated log dirs:
    ``t-0`` with segments at base offsets 0 and 100 (64 pages each), ``u-5`` in the second dir."""
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    for base in (0, 100):
        seg = d1 / "t-0" / f"{base:020d}.log"
        seg.parent.mkdir(parents=True, exist_ok=True)
        seg.write_bytes(os.urandom(64 * PAGE))
    (d2 / "u-5").mkdir(parents=True)
    (d2 / "u-5" / f"{0:020d}.log").write_bytes(b"\1" * 8 * PAGE)
    cfg = AgentConfig.model_validate(
        {
            "broker_id": 7,
            "request_log": {"enabled": False},
            "host": {"enabled": False},
            "prometheus": {"port": 0},
            "log_dirs": {"paths": [str(d1), str(d2)]},
            "page_cache": {
                "span_bytes": 16 * PAGE,
                "skip_bytes": 0,
                "max_span_bytes": 32 * PAGE,
                "max_concurrent": 2,
            },
        }
    )
    a = Agent(cfg).start()
    yield a
    a.stop()


def get(agent: Agent, query: str, method: str = "GET") -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{agent.metrics_port}/page-cache?{query}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, orjson.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, orjson.loads(e.read())


def test_answers_segment_position_and_residency_and_metrics_still_work(agent: Agent, tmp_path: Path) -> None:
    status, body = get(agent, "topic=t&partition=0&offset=150")
    assert status == 200, body
    assert body["segment"] == f"{100:020d}.log" and body["broker"] == 7
    assert body["position"] == 0  # no .index: the segment start
    assert (body["resident_pages"], body["total_pages"]) == (16, 16)
    assert body["resident_fraction"] == 1.0 and body["confirmed"] is False
    evict_page_cache(tmp_path / "d1" / "t-0" / f"{100:020d}.log")
    status, body = get(agent, "topic=t&partition=0&offset=150&span_bytes=40960")
    assert status == 200 and body["total_pages"] == 10
    assert body["resident_fraction"] < 0.5 and body["confirmed"] is True, body
    status, body = get(agent, "topic=t&partition=0&offset=99")
    assert status == 200 and body["segment"] == f"{0:020d}.log" and body["confirmed"] is False
    status, body = get(agent, "topic=u&partition=5&offset=3")  # found in the second log dir
    assert status == 200 and body["segment"] == f"{0:020d}.log"
    metrics = (
        urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=5).read().decode()
    )
    assert "linkwatch_agent_lines_read_total" in metrics


BAD = [
    # (query, status, words in the message)
    ("", 400, "missing parameter 'topic'"),
    ("partition=0&offset=1", 400, "missing parameter 'topic'"),
    ("topic=t&offset=1", 400, "missing parameter 'partition'"),
    ("topic=t&partition=0", 400, "missing parameter 'offset'"),
    ("topic=t&partition=-1&offset=1", 400, "partition='-1' is not a non-negative integer"),
    ("topic=t&partition=0&offset=abc", 400, "offset='abc' is not a non-negative integer"),
    ("topic=t&partition=0&offset=1.5", 400, "offset='1.5' is not a non-negative integer"),
    ("topic=t&partition=0&offset=", 400, "offset='' is not a non-negative integer"),
    ("topic=t&partition=2147483648&offset=1", 400, "partition=2147483648 is out of range"),
    ("topic=t&partition=0&offset=99999999999999999999", 400, "is not a non-negative integer"),
    ("topic=t&partition=0&offset=9223372036854775808", 400, "offset=9223372036854775808 is out of range"),
    ("topic=../etc&partition=0&offset=1", 400, "is not a legal Kafka topic name"),
    ("topic=..&partition=0&offset=1", 400, "is not a legal Kafka topic name"),
    ("topic=a%2Fb&partition=0&offset=1", 400, "is not a legal Kafka topic name"),
    ("topic=" + "x" * 250 + "&partition=0&offset=1", 400, "is not a legal Kafka topic name"),
    ("topic=t&topic=u&partition=0&offset=1", 400, "['topic'] given more than once"),
    ("topic=t&partition=0&offset=1&x=1", 400, "unknown parameter(s) ['x']"),
    ("topic=t&partition=0&offset=1&span_bytes=100", 400, "span_bytes=100 is out of range [4096, 131072]"),
    ("topic=t&partition=0&offset=1&span_bytes=999999999", 400, "span_bytes=999999999 is out of range"),
    ("topic=t&partition=0&offset=1&skip_bytes=999999999", 400, "skip_bytes=999999999 is out of range"),
    ("topic=t&partition=0&offset=1&&", 400, "malformed query string"),
    ("q=" + "x" * 3000, 400, "longer than 2048 characters"),
    # Well-formed but not on this broker
    ("topic=t&partition=1&offset=1", 404, "no_partition_dir: t-1 is in none of"),
    ("topic=nope&partition=0&offset=1", 404, "no_partition_dir"),
    ("topic=u&partition=5&offset=0", 200, ""),
]


@pytest.mark.parametrize(("query", "status", "words"), BAD)
def test_bad_input_each_with_its_status_and_message(
    agent: Agent, query: str, status: int, words: str
) -> None:
    got, body = get(agent, query)
    assert got == status, body
    if status != 200:
        assert words in body["message"], body
        assert body["error"] in ("bad_request", "no_partition_dir")


def test_offset_below_the_first_segment_is_not_found(agent: Agent, tmp_path: Path) -> None:
    (tmp_path / "d1" / "t-0" / f"{0:020d}.log").unlink()  # retention deleted the first segment
    status, body = get(agent, "topic=t&partition=0&offset=42")
    assert status == 404 and body["error"] == "before_log_start", body
    assert "offset 42 is below the first segment 100" in body["message"]


def test_post_is_refused_and_work_is_bounded(agent: Agent) -> None:
    assert get(agent, "topic=t&partition=0&offset=1", method="POST")[0] == 405
    # Bounded: max_concurrent requests at once, the rest are told to come back.
    endpoint = agent.page_cache
    assert endpoint is not None
    held = [endpoint._slots.acquire(blocking=False) for _ in range(2)]
    try:
        assert held == [True, True]
        status, body = get(agent, "topic=t&partition=0&offset=1")
        assert status == 503 and "more than 2 requests at once" in body["message"]
    finally:
        for _ in held:
            endpoint._slots.release()
    assert get(agent, "topic=t&partition=0&offset=1")[0] == 200


def test_without_log_dirs_it_says_so() -> None:
    cfg = AgentConfig.model_validate(
        {
            "broker_id": 1,
            "request_log": {"enabled": False},
            "host": {"enabled": False},
            "prometheus": {"port": 0},
        }
    )
    a = Agent(cfg).start()
    try:
        status, body = get(a, "topic=t&partition=0&offset=1")
        assert status == 404 and body["error"] == "no_log_dirs", body
        assert "log_dirs.paths" in body["message"]
    finally:
        a.stop()


def test_lag_confirmation_through_the_agent_names_the_method_and_every_failure(agent: Agent) -> None:
    from lag.coldread import confirm_via_agent

    url = f"http://127.0.0.1:{agent.metrics_port}"
    ok = confirm_via_agent(url, "t", 0, 150, 16 * PAGE, 0, 5.0)
    assert (ok.method, ok.confirmed, ok.segment, ok.resident_fraction) == (
        "agent",
        False,
        f"{100:020d}.log",
        1.0,
    )
    assert ok.reason.endswith(f"[agent {url}]") and "resident in the page cache" in ok.reason
    rows = [
        (url, "t", 9, f"agent {url} answered 404: broker 7: no_partition_dir: t-9 is in none of"),
        (url, "t", 0, f"agent {url} answered 400: span_bytes=999999999 is out of range"),
        ("http://127.0.0.1:1", "t", 0, "agent http://127.0.0.1:1 not reachable:"),
    ]
    for base, topic, partition, words in rows:
        span = 999_999_999 if "span_bytes" in words else 16 * PAGE
        got = confirm_via_agent(base, topic, partition, 150, span, 0, 5.0)
        assert got.confirmed is None and got.method == "agent", got
        assert got.reason.startswith(words), got.reason
