"""Bench: what the probe costs the brokers (requests/s, bytes/s, CPU) and its own host (CPU, RSS).

    .venv/bin/python bench/probe_cost.py                          # starts (and stops) a 3-broker cluster
    .venv/bin/python bench/probe_cost.py --cluster-dir /tmp/lw-x  # a running ``linkwatch cluster up``

One run, two phases of ``--seconds`` each on the same cluster:

* **idle** (the baseline) — nothing but the cluster itself (KRaft, heartbeats);
* **probe** — :class:`probe.service.ProbeService` with its default configuration (one probe to
  every partition per second, commits every second to one group per coordinator broker, a
  ``ProbeSample`` per broker and 10 s window on ``linkwatch.samples``), started in this process
  ``--warmup-seconds`` before the phase so the topic and groups exist and the clients are
  connected: the phase measures the steady state. The /metrics endpoint is not served (no
  scraper here), so its cost is not in the figures.

Before the idle phase the run creates what any cluster in use already has: ``__consumer_offsets``
(a FindCoordinator, else made inside the probe's phase) and ``linkwatch.samples`` (3 partitions,
RF 3, the testbed's broker defaults; the cluster creates no topic on use). Their replica
fetchers then run in both phases, and the difference is what the probe adds on a cluster in use.

Per phase, read before and after from every broker's Jolokia: requests (sum of
``kafka.network:type=RequestMetrics,name=RequestsPerSec`` ``Count`` over request types, both
listeners; ``FetchConsumer`` and ``FetchFollower`` are subsets of ``Fetch``, listed but not
summed), the largest types, ``BrokerTopicMetrics`` ``BytesInPerSec`` / ``BytesOutPerSec`` (record bytes of
all topics), the socket server's ``incoming-byte-total`` / ``outgoing-byte-total`` on the client
listener (every request and response byte), and the broker JVMs' CPU seconds (``/proc``).
The probe's host cost: CPU seconds of this process per minute (``time.process_time``; the bench
only sleeps meanwhile) and its peak RSS (``ru_maxrss``) beside the RSS before the probe started.
The brokers keep ``kafka.request.logger`` at DEBUG (the testbed's default) in both phases.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from _kit import process_cpu_s, retry  # bench/ is on sys.path (run as a script)
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from linkwatch.records import SAMPLES_TOPIC
from probe.config import ProbeConfig
from probe.service import ProbeService
from testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port

REQUESTS = "kafka.network:type=RequestMetrics,name=RequestsPerSec,*"
TOPIC_BYTES = ("BytesInPerSec", "BytesOutPerSec")
SOCKETS = "kafka.server:type=socket-server-metrics,*"
SOCKET_BYTES = ("incoming-byte-total", "outgoing-byte-total")
FETCH_SUBSETS = ("FetchConsumer", "FetchFollower")  # Kafka counts these under Fetch as well


@dataclass
class Counters:
    """Cumulative counters of every broker at one instant (summed over brokers)."""

    t: float
    requests: Counter[str] = field(default_factory=Counter)  # by request type
    topic_bytes: Counter[str] = field(default_factory=Counter)  # BytesInPerSec, BytesOutPerSec
    socket_bytes: Counter[str] = field(default_factory=Counter)  # incoming/outgoing on the client listener
    broker_cpu_s: float = 0.0


def jolokia(url: str, requests: list[dict]) -> list[dict]:
    req = urllib.request.Request(
        url.rstrip("/") + "/",
        data=json.dumps(requests).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        replies = json.loads(resp.read())
    bad = [r for r in replies if r.get("status") != 200]
    if bad:
        raise RuntimeError(f"{url}: Jolokia refused {[(r.get('request'), r.get('error')) for r in bad]}")
    return replies


def read_counters(state: ClusterState) -> Counters:
    out = Counters(t=time.monotonic())
    for node in state.nodes:
        requests, topic, sockets = jolokia(
            node.jolokia_url,
            [
                {"type": "read", "mbean": REQUESTS, "attribute": "Count"},
                {
                    "type": "read",
                    "mbean": "kafka.server:type=BrokerTopicMetrics,*",
                    "attribute": "Count",
                },
                {"type": "read", "mbean": SOCKETS, "attribute": list(SOCKET_BYTES)},
            ],
        )
        for mbean, attrs in requests["value"].items():
            out.requests[re.search(r"request=([^,]+)", mbean).group(1)] += attrs["Count"]
        for mbean, attrs in topic["value"].items():
            name = re.search(r"name=([^,]+)", mbean).group(1)
            if name in TOPIC_BYTES and "topic=" not in mbean:  # the all-topics meter only
                out.topic_bytes[name] += attrs["Count"]
        for mbean, attrs in sockets["value"].items():
            listener = re.search(r"listener=([^,]+)", mbean)
            if listener and listener.group(1) != "CONTROLLER" and "networkProcessor=" in mbean:
                for attr in SOCKET_BYTES:
                    out.socket_bytes[attr] += attrs[attr]
        out.broker_cpu_s += process_cpu_s(node.pid)
    return out


@dataclass
class Phase:
    name: str
    seconds: float
    requests: Counter[str]
    topic_bytes: Counter[str]
    socket_bytes: Counter[str]
    broker_cpu_s: float

    @classmethod
    def between(cls, name: str, a: Counters, b: Counters) -> Phase:
        return cls(
            name,
            b.t - a.t,
            b.requests - a.requests,
            b.topic_bytes - a.topic_bytes,
            b.socket_bytes - a.socket_bytes,
            b.broker_cpu_s - a.broker_cpu_s,
        )

    def rates(self) -> dict[str, float]:
        s = self.seconds
        total = sum(n for k, n in self.requests.items() if k not in FETCH_SUBSETS)
        return {
            "requests/s (all types)": total / s,
            "record bytes in/s (BytesInPerSec)": self.topic_bytes["BytesInPerSec"] / s,
            "record bytes out/s (BytesOutPerSec)": self.topic_bytes["BytesOutPerSec"] / s,
            "network bytes in/s (client listener)": self.socket_bytes["incoming-byte-total"] / s,
            "network bytes out/s (client listener)": self.socket_bytes["outgoing-byte-total"] / s,
            "broker CPU s/min (3 JVMs)": self.broker_cpu_s / s * 60,
        }


def measure(state: ClusterState, name: str, seconds: float) -> Phase:
    a = read_counters(state)
    time.sleep(seconds)
    return Phase.between(name, a, read_counters(state))


def rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def prepare(state: ClusterState, settle_s: float) -> None:
    """Create ``__consumer_offsets`` and ``linkwatch.samples`` (if absent), then let them settle."""
    admin = KafkaAdminClient(bootstrap_servers=state.bootstrap, client_id="probe-cost-bench")
    try:
        if SAMPLES_TOPIC not in admin.list_topics():
            admin.create_topics([NewTopic(SAMPLES_TOPIC, 3, len(state.nodes))])
        # FindCoordinator creates __consumer_offsets; it answers once the partitions are led.
        retry(lambda: admin.list_group_offsets("probe-cost-bench"), attempts=60, delay_s=1.0)
    finally:
        admin.close()
    time.sleep(settle_s)


def run(state: ClusterState, args: argparse.Namespace) -> None:
    prepare(state, args.warmup_seconds)
    idle = measure(state, "idle", args.seconds)
    print(f"idle phase: {idle.seconds:.1f} s", flush=True)

    cfg = ProbeConfig(bootstrap_servers=state.bootstrap, instance=f"bench-{uuid.uuid4().hex[:6]}")
    rss_before = rss_mb()
    service = ProbeService(cfg)
    stop = threading.Event()
    windows: list[dict] = []
    thread = threading.Thread(target=service.run, args=(stop, lambda _s, w: windows.append(w)), daemon=True)
    thread.start()
    try:
        time.sleep(args.warmup_seconds)
        cpu0 = time.process_time()
        first_window = len(windows)
        probe = measure(state, "probe", args.seconds)
        cpu = time.process_time() - cpu0
    finally:
        stop.set()
        thread.join(30)
        service.close()
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    measured = windows[first_window:]
    sent = sum(w.sent for ws in measured for w in ws.values())
    ok = sum(w.ok for ws in measured for w in ws.values())
    decided = sum(w.decided for ws in measured for w in ws.values())
    print(
        f"probe phase: {probe.seconds:.1f} s after {args.warmup_seconds:.0f} s warm-up; {len(measured)} windows, "
        f"{sent} probes sent, availability {ok}/{decided}; leaders {sorted(service.leaders().values())}",
        flush=True,
    )

    rows_idle, rows_probe = idle.rates(), probe.rates()
    print(f"\n{'per second over all 3 brokers':<40}{'idle':>12}{'probe':>12}{'probe − idle':>14}")
    for key in rows_idle:
        a, b = rows_idle[key], rows_probe[key]
        print(f"{key:<40}{a:>12.1f}{b:>12.1f}{b - a:>14.1f}")
    print(f"\n{'requests/s by type (largest first)':<40}{'idle':>12}{'probe':>12}{'probe − idle':>14}")
    per_s = {k: (idle.requests[k] / idle.seconds, probe.requests[k] / probe.seconds) for k in probe.requests}
    for k, (a, b) in sorted(per_s.items(), key=lambda kv: -kv[1][1])[:10]:
        print(f"  {k:<38}{a:>12.2f}{b:>12.2f}{b - a:>14.2f}")
    print(
        f"\nprobe process: CPU {cpu / probe.seconds * 60:.2f} s per minute "
        f"({cpu:.2f} s over {probe.seconds:.0f} s); RSS {rss_before:.0f} MB before the probe, "
        f"peak {peak_rss:.0f} MB"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster-dir", type=Path, help="a running testbed cluster (else one is started)")
    ap.add_argument("--seconds", type=float, default=60, help="length of each phase")
    ap.add_argument("--warmup-seconds", type=float, default=20, help="probe running before its phase")
    ap.add_argument("--smoke", action="store_true", help="a size that runs in seconds (3 s phases)")
    args = ap.parse_args()
    if args.smoke:
        args.seconds, args.warmup_seconds = 3.0, 3.0
    # A TERM (e.g. timeout) unwinds like Ctrl-C, so the brokers are always stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.cluster_dir is not None:
        state = ClusterState.load(args.cluster_dir)
        if state is None:
            sys.exit(f"no cluster state under {args.cluster_dir}")
        run(state, args)
        return 0
    with tempfile.TemporaryDirectory(prefix="probe-cost-") as tmp:
        cluster = LocalCluster(
            ClusterSpec(brokers=3, root=Path(tmp) / "kafka", base_port=find_free_base_port(3, start=37000))
        )
        t0 = time.monotonic()
        state = cluster.up()
        print(f"cluster up in {time.monotonic() - t0:.0f}s: {state.bootstrap}", flush=True)
        try:
            run(state, args)
        finally:
            cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
