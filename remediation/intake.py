"""The boundary findings cross before any guardrail or plan reads them: findings are untrusted.

A finding comes from the findings topic (anyone who can produce to it), from an alert's labels
or from a finding source's code; the remediator reads its subject, rule, severity, timestamp
and evidence to decide whether to change the cluster. :func:`admit` checks every one of those
fields **once**, here, against the cluster as it is now, and returns either the
:class:`~linkwatch.records.Finding` (safe to judge) or a :class:`Dropped` with a short reason
(for the ``dropped`` counters and the audit log). Nothing that fails reaches the memory of seen
findings, the circuit breaker, a plan or the persisted state, so one bad finding can never make
later findings fail or count toward a breaker.

Rules (each a small named check; the first that fails names the reason):

* ``not_a_finding`` / the decoder's reasons (``bad_type``, ``missing_field``...): the record
  itself does not decode as a finding;
* ``other_cluster``: ``cluster`` is not this remediator's ``cluster``;
* ``bad_rule``: the rule is not a short name (``[A-Za-z0-9_.:-]``, at most 128 characters);
* ``bad_severity``: not one of ``info``, ``warning``, ``critical``;
* ``stale`` / ``from_future``: ``ts_ms`` older than ``intake.max_age_s`` or more than
  ``intake.max_future_s`` ahead of this host's clock;
* ``bad_subject``: not ``<kind>:<name>`` with a known kind and a well-formed name (a broker id
  is 1-10 ASCII digits; a topic a Kafka topic name);
* ``unknown_broker``: the subject's broker is not in the cluster's current broker set;
* ``too_long`` / ``bad_evidence``: a text field over ``intake.max_text_chars``, or evidence that
  is not a JSON object of at most ``intake.max_evidence_bytes``;
* ``bad_evidence`` also when the remediation the rule maps to rejects the evidence its plan
  reads (:meth:`~remediation.base.Remediation.check_evidence`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import orjson

from linkwatch.records import Finding, RecordError, from_dict
from remediation.config import IntakeConfig

SEVERITIES = frozenset({"info", "warning", "critical"})
RULE_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
BROKER_ID_RE = re.compile(r"0|[1-9][0-9]{0,9}")  # canonical: broker:01 would dodge broker:1's cooldown
TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")
PARTITION_RE = re.compile(r"(?P<topic>[A-Za-z0-9._-]{1,249})-(?P<partition>[0-9]{1,10})")
# Printable text without control characters: names of groups, clients, clusters, log dirs.
NAME_RE = re.compile(r"[^\x00-\x1f\x7f]{1,1024}")
PREVIEW_CHARS = 160
MAX_SUBJECT_CHARS = 1100
MAX_TS_MS = 10**15  # year 33658: any later ts_ms is not a time (and would overflow a float)


@dataclass(frozen=True)
class Dropped:
    """A finding refused at the boundary: ``reason`` is the counter label, ``detail`` says why."""

    reason: str
    detail: str
    preview: str


def preview(value: Any) -> str:
    """A bounded rendering of untrusted input for logs and the audit (never the whole thing)."""
    try:
        text = repr(value)
    except Exception as e:  # a repr that raises is itself untrusted input
        text = f"<unrepresentable {type(value).__name__}: {type(e).__name__}>"
    return text if len(text) <= PREVIEW_CHARS else f"{text[:PREVIEW_CHARS]}... ({len(text)} characters)"


def broker_of(subject: str) -> int | None:
    """The broker a well-formed subject names: ``broker:2`` and ``log_dir:2:/d`` -> 2; else None.

    Only canonical ASCII digits count (``str.isdigit`` also accepts ``²``, which ``int``
    refuses; ``01`` would name broker 1 under another subject)."""
    kind, _, rest = subject.partition(":")
    if kind not in ("broker", "log_dir"):
        return None
    head = rest.split(":", 1)[0]
    return int(head) if BROKER_ID_RE.fullmatch(head) else None


def _subject_problem(subject: str, brokers: Collection[int]) -> tuple[str, str] | None:
    """Why ``subject`` is not one the remediator may act on (reason, detail), or None."""
    if subject == "cluster":
        return None
    if len(subject) > MAX_SUBJECT_CHARS:
        return "bad_subject", f"subject over {MAX_SUBJECT_CHARS} characters"
    kind, sep, rest = subject.partition(":")
    if not sep:
        return "bad_subject", "not <kind>:<name>"
    if kind in ("broker", "log_dir"):
        head, _, path = rest.partition(":")
        if not BROKER_ID_RE.fullmatch(head):
            return "bad_subject", f"{kind} id is not 1-10 ASCII digits without leading zeros"
        if kind == "log_dir" and not NAME_RE.fullmatch(path):
            return "bad_subject", "log_dir:<broker>:<path> without a printable path"
        if path and not NAME_RE.fullmatch(path):
            return "bad_subject", "unprintable log dir"
        if int(head) not in brokers:
            return "unknown_broker", f"broker {int(head)} is not in the cluster ({sorted(brokers)})"
        return None
    checks: dict[str, re.Pattern[str]] = {
        "topic": TOPIC_RE,
        "topic-partition": PARTITION_RE,
        "group": NAME_RE,
        "client": NAME_RE,
        "cluster": NAME_RE,
    }
    pattern = checks.get(kind)
    if pattern is None:
        return "bad_subject", f"unknown subject kind {preview(kind)}"
    if not pattern.fullmatch(rest):
        return "bad_subject", f"malformed {kind} name"
    return None


def _evidence_problem(evidence: Any, limit: int) -> str | None:
    if not isinstance(evidence, dict):
        return "evidence is not an object"
    try:
        size = len(orjson.dumps(evidence))
    except (TypeError, orjson.JSONEncodeError) as e:
        return f"evidence is not JSON ({e})"
    return f"evidence is {size} bytes (max {limit})" if size > limit else None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def admit(
    raw: Finding | dict[str, Any] | Any,
    *,
    cluster: str,
    brokers: Collection[int],
    now_s: float,
    cfg: IntakeConfig,
    check_evidence: Callable[[Finding], str | None] = lambda f: None,
) -> Finding | Dropped:
    """The finding if every field the remediator reads is valid now, else why it is dropped."""
    try:
        finding = _decoded(raw)
    except RecordError as e:
        return Dropped(e.reason, e.detail[:PREVIEW_CHARS], preview(raw))
    problem = _problem(finding, cluster, brokers, now_s, cfg)
    if problem is None:
        try:
            detail = check_evidence(finding)
        except Exception as e:  # a remediation's check that raises refuses the finding, no more
            detail = f"evidence check raised {type(e).__name__}"
        problem = ("bad_evidence", detail) if detail else None
    if problem is not None:
        return Dropped(problem[0], problem[1], preview(raw))
    return finding


def _decoded(raw: Any) -> Finding:
    if isinstance(raw, Finding):
        # Built in code, not decoded: its fields were never type-checked. Round-trip it.
        try:
            raw = orjson.loads(orjson.dumps(raw.to_dict()))
        except (TypeError, ValueError, orjson.JSONEncodeError) as e:
            raise RecordError("bad_type", f"not JSON-representable ({type(e).__name__})") from None
    if not isinstance(raw, dict):
        raise RecordError("not_a_finding", f"a {type(raw).__name__}, not an object")
    record = from_dict(raw)
    if not isinstance(record, Finding):
        raise RecordError("not_a_finding", f"kind={record.KIND}")
    return record


def _problem(
    f: Finding, cluster: str, brokers: Collection[int], now_s: float, cfg: IntakeConfig
) -> tuple[str, str] | None:
    if f.cluster != cluster:
        return "other_cluster", f"cluster {preview(f.cluster)} is not {cluster!r}"
    if not RULE_RE.fullmatch(f.rule):
        return "bad_rule", "rule is not [A-Za-z0-9_.:-]{1,128}"
    if f.severity not in SEVERITIES:
        return "bad_severity", f"severity {preview(f.severity)} not in {sorted(SEVERITIES)}"
    if not 0 < f.ts_ms < MAX_TS_MS:
        return "bad_value", "ts_ms is not a time in milliseconds"
    age_s = now_s - f.ts_ms / 1000
    if age_s > cfg.max_age_s:
        return "stale", f"ts_ms is {age_s:.0f} s old (max_age_s {cfg.max_age_s:.0f})"
    if -age_s > cfg.max_future_s:
        return "from_future", f"ts_ms is {-age_s:.0f} s ahead (max_future_s {cfg.max_future_s:.0f})"
    for name in ("summary", "action", "source"):
        if len(getattr(f, name)) > cfg.max_text_chars:
            return "too_long", f"{name} over {cfg.max_text_chars} characters"
    subject = _subject_problem(f.subject, brokers)
    if subject is not None:
        return subject
    evidence = _evidence_problem(f.evidence, cfg.max_evidence_bytes)
    return ("bad_evidence", evidence) if evidence else None


def finite_number(value: Any) -> bool:
    """A real, finite number (not a bool, not NaN or infinite): what evidence checks accept."""
    return _finite(value)
