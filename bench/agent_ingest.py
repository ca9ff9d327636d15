"""Request-log ingest speed of the agent vs a plain ``json.loads`` loop, in the same run.

    .venv/bin/python bench/agent_ingest.py [--log <captured kafka-request.log>]... [--repeat 7]
    .venv/bin/python bench/agent_ingest.py --steady-rate 10000 --seconds 30
    .venv/bin/python bench/agent_ingest.py --steady-rate 10000 --agent-command /opt/linkwatch/bin/linkwatch

Input: real broker lines, by default both captured logs committed as test fixtures
(tests/agent/fixtures/kafka-request.log, a broker under produce and consume traffic, and
kafka-request-kraft.log, a combined broker+controller whose lines are mostly KRaft fetches), each
cycled to ``--lines`` lines and re-stamped as if written at ``--rate`` lines/s (one busy broker;
a sparse log would measure window closing, not ingest). ``--as-captured`` uses the log's own
lines and timestamps instead.

Part 1 (one core, CPU time of this single-threaded process), per input: the agent's full path
(file follower's blocks -> fast extractor / line parser -> window sketches per (request type,
stage) -> closed windows as records) over that file; against the baselines "for each line of
the file: orjson.loads(the JSON part)" (a full parse) and the same loop with json.loads. Rounds
are interleaved (the machine is shared); prints the median and best of each in lines per
CPU-second, the agent's ratio to each baseline (medians of the same run), and peak RSS.

Part 2 (``--steady-rate``): replays the lines into a fresh file at a steady rate while a real
``linkwatch agent`` subprocess follows it, and prints the agent's CPU share and RSS from /proc.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import msgspec
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _kit import process_cpu_s  # bench/ is on sys.path (run as a script)

from agent.health import Health
from agent.requestlog import bulk
from agent.requestlog.follow import FileFollower
from agent.requestlog.ingest import ingest_block, ingest_lines
from agent.requestlog.parse import LineParser
from agent.requestlog.typed import decode_tails
from agent.requestlog.window import WindowAggregator


def cpu() -> float:
    return time.process_time()


def rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def agent_pass(path: Path) -> tuple[int, int]:
    health = Health()
    follower = FileFollower(path, start_at_end=False)
    agg = WindowAggregator(cluster="bench", broker=1)
    parser = LineParser()
    windows = 0
    while not follower.caught_up:  # as RequestLogSource.poll reads
        for block in follower.iter_blocks():
            windows += len(ingest_block(block, parser, agg, health))
    windows += len(agg.close_all())
    follower.close()
    return health.lines_read, windows


def json_pass(path: Path, loads) -> int:
    """The baseline: read the file line by line and parse each line's JSON in full."""
    n = 0
    with open(path, "rb") as f:
        for line in f:
            i = line.find(b"{")
            if i >= 0:
                loads(line[i : line.rfind(b"}") + 1])
                n += 1
    return n


def blocks_of(path: Path) -> list[bytes]:
    """The file as the follower hands it over (blocks of complete lines)."""
    follower = FileFollower(path, start_at_end=False)
    blocks: list[bytes] = []
    while not follower.caught_up:
        blocks += follower.iter_blocks()
    follower.close()
    return blocks


def floor_newlines(path: Path) -> int:
    """Floor 1: read the file as the follower does and find every line's end, nothing else."""
    n = 0
    follower = FileFollower(path, start_at_end=False)
    while not follower.caught_up:
        for block in follower.iter_blocks():
            index, pos, size = block.index, 0, len(block)
            while pos < size:
                pos = index(b"\n", pos) + 1
                n += 1
    follower.close()
    return n


TAIL_RE = re.compile(rb',"connection":"[^"]*","totalTimeMs":([0-9.]+),"requestQueueTimeMs"')


def floor_regex(blocks: list[bytes]) -> int:
    """Floor 2: one compiled regex over each block (in memory), finding each line's stage tail."""
    return sum(len(TAIL_RE.findall(block)) for block in blocks)


def floor_scan(blocks: list[bytes]) -> int:
    """Floor 3: the agent's per-line scan alone (positions, stamp, type, tail slice)."""
    parser = LineParser()
    return sum(len(bulk.scan_lines(block, parser.ts)[0]) for block in blocks)


def floor_tails(tails: list[list[bytes]]) -> int:
    """Floor 4: the typed decode of ready-sliced stage tails alone (one msgspec call per
    request type and block, as the bulk path makes)."""
    return sum(len(decode_tails(chunk)) for chunk in tails)


def floor_count(values: list[list[float]]) -> int:
    """Floor 5: counting seven ready-made stage values per line into a Counter, nothing else."""
    counts: Counter[float] = Counter()
    for chunk in values:
        counts.update(chunk)
    return sum(len(chunk) for chunk in values) // 7


def stage_tails(blocks: list[bytes]) -> list[list[bytes]]:
    """The stage tails of each block, per request type, as the bulk path's scan slices them."""
    parser = LineParser()
    return [group[1::2] for block in blocks for group in bulk.scan_lines(block, parser.ts)[1].values()]


def stage_values(tails: list[list[bytes]]) -> list[list[float]]:
    return [[v for tail in decode_tails(chunk) for v in msgspec.structs.astuple(tail)[1:]] for chunk in tails]


def agent_lines_pass(lines: list[bytes]) -> int:
    health = Health()
    agg = WindowAggregator(cluster="bench", broker=1)
    ingest_lines(lines, LineParser(), agg, health)
    agg.close_all()
    return health.lines_read


FIXTURES = Path(__file__).resolve().parents[1] / "tests/agent/fixtures"
CAPTURES = [FIXTURES / "kafka-request.log", FIXTURES / "kafka-request-kraft.log"]
FIXTURE = CAPTURES[0]
AGENT = "agent (follow+parse+sketch)"


def part1(path: Path, repeat: int, floors: bool = False) -> None:
    lines = path.read_bytes().splitlines()
    size_mb = path.stat().st_size / 1e6
    print(
        f"log: {path} ({len(lines)} lines, {size_mb:.1f} MB, mean {size_mb * 1e6 / max(1, len(lines)):.0f} B/line)"
    )
    passes = {
        AGENT: lambda: agent_pass(path)[0],
        "agent, lines already in memory": lambda: agent_lines_pass(lines),
        "baseline json.loads loop": lambda: json_pass(path, json.loads),
        "orjson.loads full parse loop": lambda: json_pass(path, orjson.loads),
    }
    if floors:
        blocks = blocks_of(path)
        tails = stage_tails(blocks)
        values = stage_values(tails)
        passes["floor: read + find line ends"] = lambda: floor_newlines(path)
        passes["floor: one tail regex per block"] = lambda: floor_regex(blocks)
        passes["floor: agent's line scan alone"] = lambda: floor_scan(blocks)
        passes["floor: typed tail decode alone"] = lambda: floor_tails(tails)
        passes["floor: Counter of 7 values/line"] = lambda: floor_count(values)
    # Interleaved rounds: the machine is shared, so load shifts during a run.
    rates: dict[str, list[float]] = {name: [] for name in passes}
    for _ in range(repeat):
        for name, fn in passes.items():
            c0 = cpu()
            n = fn()
            dt = cpu() - c0
            rates[name].append(n / dt if dt > 0 else 0.0)
    median = {name: statistics.median(r) for name, r in rates.items()}
    orjson_rate = median["orjson.loads full parse loop"]
    for name, r in rates.items():
        print(
            f"  {name:32s} {median[name]:10,.0f} lines/CPU-s median of {repeat} (best {max(r):,.0f})"
            f"  {1e6 / median[name]:5.2f} us/line = {orjson_rate / median[name]:.2f} of orjson's"
        )
    print(
        f"  agent / orjson full parse = {median[AGENT] / median['orjson.loads full parse loop']:.2f}x, "
        f"agent / json.loads = {median[AGENT] / median['baseline json.loads loop']:.2f}x (medians); "
        f"peak RSS {rss_peak_mb():.0f} MB"
    )


def retimed(path: Path, out: Path, rate: int, n_lines: int) -> Path:
    """The lines of ``path``, cycled to ``n_lines``, re-stamped as if written at ``rate``
    lines/s (a busy broker's density)."""
    base = time.mktime((2026, 1, 1, 0, 0, 0, 0, 0, -1))
    src = [line + b"\n" for line in path.read_bytes().splitlines() if line.strip()]
    with open(out, "wb") as dst:
        for i in range(n_lines):
            line = src[i % len(src)]
            t = base + i / rate
            stamp = time.strftime("[%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t * 1000) % 1000:03d}]"
            dst.write(stamp.encode() + line[25:])
    return out


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("linkwatch_agent_") and "{" in line:
            out[line.split("{")[0]] = float(line.rsplit(" ", 1)[1])
    return out


def part2(path: Path, rate: int, seconds: float, command: list[str] | None = None) -> None:
    lines = path.read_bytes().splitlines()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "kafka-request.log"
        log.write_bytes(b"")
        cfg = Path(tmp) / "agent.yaml"
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        cfg.write_text(
            f"cluster: bench\nbroker_id: 1\nrequest_log:\n  path: {log}\nmetrics:\n  port: {port}\nhost:\n  enabled: false\n"
        )
        command = command or [sys.executable, "-m", "cli.main"]
        agent = subprocess.Popen([*command, "agent", "--config", str(cfg)])
        try:
            time.sleep(3)  # start-up (imports) is not part of the steady state
            c0, t0 = process_cpu_s(agent.pid), time.monotonic()
            written, i = 0, 0
            with open(log, "ab") as out:
                while time.monotonic() - t0 < seconds:
                    due = int((time.monotonic() - t0) * rate)
                    if due > written:
                        chunk = []
                        for _ in range(due - written):
                            line = lines[i % len(lines)]
                            # re-stamp with now so windows keep closing
                            chunk.append(time.strftime("[%Y-%m-%d %H:%M:%S,000]").encode() + line[25:])
                            i += 1
                        out.write(b"\n".join(chunk) + b"\n")
                        out.flush()
                        written = due
                    time.sleep(0.01)
            time.sleep(1)
            used, wall = process_cpu_s(agent.pid) - c0, time.monotonic() - t0
            health = scrape(port)
            print(
                f"steady replay: {written / seconds:,.0f} lines/s for {seconds:.0f}s -> agent CPU "
                f"{100 * used / wall:.1f}% of one core, RSS {proc_rss_mb(agent.pid):.0f} MB; "
                f"agent read {health.get('linkwatch_agent_lines_read_total', 0):,.0f} of {written:,} lines, "
                f"{health.get('linkwatch_agent_log_behind_bytes', 0):,.0f} bytes behind"
            )
        finally:
            agent.terminate()
            agent.wait(timeout=20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--log",
        type=Path,
        action="append",
        help="captured kafka-request.log, repeatable (default: both committed captures)",
    )
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--lines", type=int, default=30_000)
    ap.add_argument("--rate", type=int, default=10_000, help="lines/s the re-stamped lines are spread at")
    ap.add_argument("--as-captured", action="store_true", help="time the log as it is, not re-stamped")
    ap.add_argument("--steady-rate", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument(
        "--agent-command",
        help="the linkwatch command the steady replay runs (e.g. a linkwatch[agent] install's "
        "bin/linkwatch); default: this interpreter's -m cli.main",
    )
    ap.add_argument(
        "--floors",
        action="store_true",
        help="also time floors: line ends, a regex, the scan, the typed tail decode, counting",
    )
    ap.add_argument("--smoke", action="store_true", help="a size that runs in seconds (3,000 lines, 1 round)")
    args = ap.parse_args()
    if args.smoke:
        args.repeat, args.lines = 1, 3_000
    logs = args.log or CAPTURES
    for log in logs:
        if args.as_captured:
            part1(log, args.repeat, args.floors)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                print(f"{log}: cycled to {args.lines:,} lines, re-stamped at {args.rate:,} lines/s")
                part1(retimed(log, Path(tmp) / "dense.log", args.rate, args.lines), args.repeat, args.floors)
        if args.steady_rate:
            part2(log, args.steady_rate, args.seconds, args.agent_command and [args.agent_command])


if __name__ == "__main__":
    main()
