"""``linkwatch <component> check``: try what a config names before the process relies on it.

A config that validates can still name a cluster that does not answer, a request log that is not
there or a Jolokia that is not listening. A check runs one probe per such thing and prints one
line each, ``✓`` or ``✗``, naming the config key, what was found and, for a ✗, what to change.

Contract: a probe is a callable returning a :class:`Probe`; :func:`run` calls them in order and
turns any exception a probe raises into a ✗ line of its own (a check never ends in a
traceback); a probe that depends on an earlier one (topics on the cluster answering) is skipped
with a ✗ saying so. Secrets never appear: Kafka is named by :func:`kafka_client.describe`. The
command exits 0 when every line is ✓, else 1.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HTTP_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Probe:
    ok: bool
    key: str  # the config key the line is about
    text: str  # what was found (and, when not ok, what to change), one line

    def line(self) -> str:
        return f"{'✓' if self.ok else '✗'} {self.key}: {self.text}"


def run(probes: Iterable[Callable[[], Probe | list[Probe]]]) -> list[Probe]:
    """Every probe's lines, in order; a probe that raises is a ✗ naming the exception."""
    out: list[Probe] = []
    for probe in probes:
        try:
            got = probe()
        except Exception as e:  # a check reports, it never fails with a traceback
            key = getattr(probe, "key", getattr(probe, "__name__", "check"))
            out.append(Probe(False, str(key), f"{type(e).__name__}: {str(e)[:300]}"))
            continue
        out.extend(got if isinstance(got, list) else [got])
    return out


def readable_file(path: Path, key: str, what: str = "file") -> Probe:
    p = Path(path)
    if not p.exists():
        parent = "exists" if p.parent.is_dir() else "does not exist either"
        return Probe(False, key, f"{p} does not exist (its directory {parent}); is this the {what}'s path?")
    if not p.is_file():
        return Probe(False, key, f"{p} is not a file")
    if not os.access(p, os.R_OK):
        return Probe(False, key, f"{p} cannot be read by this user (uid {os.getuid()})")
    return Probe(True, key, f"{p} readable ({p.stat().st_size} bytes)")


def writable_dir(path: Path, key: str, create: bool = True) -> Probe:
    """A directory this process can write (or create, when its nearest existing parent is
    writable: the process creates it at start)."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            return Probe(False, key, f"{p} is not a directory")
        if not os.access(p, os.W_OK | os.X_OK):
            return Probe(False, key, f"{p} cannot be written by this user (uid {os.getuid()})")
        return Probe(True, key, f"{p} writable")
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if create and parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
        return Probe(True, key, f"{p} does not exist yet; it will be created (under {parent})")
    return Probe(False, key, f"{p} does not exist and cannot be created ({parent} is not writable)")


def existing_dirs(paths: Iterable[Path], key: str) -> Probe:
    listed = [Path(p) for p in paths]
    missing = [str(p) for p in listed if not p.is_dir()]
    if missing:
        return Probe(False, key, f"not directories: {', '.join(missing)}")
    return Probe(True, key, f"{len(listed)} director{'y' if len(listed) == 1 else 'ies'} present")


def http_answers(url: str, key: str) -> Probe:
    """``url`` answers an HTTP GET with a status below 500 within a few seconds."""
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as r:
            return Probe(True, key, f"{url} answers (HTTP {r.status})")
    except urllib.error.HTTPError as e:
        if e.code < 500:
            return Probe(True, key, f"{url} answers (HTTP {e.code})")
        return Probe(False, key, f"{url} answers HTTP {e.code}")
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return Probe(False, key, f"{url} does not answer ({reason}); is it running, and is this its address?")


class KafkaProbes:
    """The cluster a ``kafka:`` section names: it answers (with the section's security settings),
    and the topics the config names exist. One admin client for all; closed by :meth:`close`."""

    def __init__(self, kafka: Any, key: str = "kafka.bootstrap_servers") -> None:
        self.kafka = kafka
        self.key = key
        self._admin: Any = None
        self._failed: str | None = None

    def answers(self) -> Probe:
        from linkwatch import reach
        from linkwatch.errors import LinkwatchError
        from linkwatch.kafka_client import (
            describe,
            explained_connect_errors,
            kafka_python_kwargs,
            known_brokers,
        )

        try:
            reach.check_kafka(self.kafka, self.key)
            with explained_connect_errors(self.kafka), reach.quiet_client():
                from linkwatch.kafka_client import admin_client

                self._admin = admin_client(**kafka_python_kwargs(self.kafka, "check"))
        except LinkwatchError as e:
            self._failed = str(e)
            return Probe(False, self.key, str(e))
        brokers = len(known_brokers(self._admin))
        return Probe(True, self.key, f"{describe(self.kafka)} answers ({brokers} brokers)")

    def topics(self, named: Mapping[str, str], missing_ok: Iterable[str] = ()) -> list[Probe]:
        """One line per ``key -> topic``; keys in ``missing_ok`` are topics the process creates
        itself (a missing one is then ✓, said so)."""
        if self._admin is None:
            why = "skipped: the cluster did not answer" if self._failed else "skipped"
            return [Probe(False, key, f"{topic}: {why}") for key, topic in named.items()]
        listed = set(self._admin.list_topics())
        creates = set(missing_ok)
        out = []
        for key, topic in named.items():
            if topic in listed:
                out.append(Probe(True, key, f"topic {topic} exists"))
            elif key in creates:
                out.append(Probe(True, key, f"topic {topic} does not exist yet; this process creates it"))
            else:
                out.append(
                    Probe(
                        False, key, f"topic {topic} does not exist; `linkwatch topics` lists and creates them"
                    )
                )
        return out

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


def report(lines: list[Probe], echo: Callable[[str], Any]) -> int:
    """Print each line; the exit code (0: every probe passed)."""
    for p in lines:
        echo(p.line())
    bad = sum(not p.ok for p in lines)
    echo(f"{len(lines) - bad} of {len(lines)} checks passed" if bad else f"all {len(lines)} checks passed")
    return 1 if bad else 0
