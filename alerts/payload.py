"""Alertmanager webhook messages (version 4): validated into :class:`AlertEvent` objects.

Anything that is not a well-formed v4 message raises :class:`PayloadError` with a short
machine-readable ``reason`` and a ``detail`` naming the offending field; the receiver answers
400 with both. Bounds: at most :data:`MAX_ALERTS` alerts per message, :data:`MAX_LABELS`
labels/annotations per alert, :data:`MAX_TEXT` characters per value.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from alerts.hooks.base import AlertEvent

MAX_ALERTS = 1000
MAX_LABELS = 64
MAX_TEXT = 16384
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
_STATUSES = ("firing", "resolved")


class PayloadError(ValueError):
    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True)
class WebhookMessage:
    receiver: str
    status: str
    group_key: str
    alerts: list[AlertEvent]


def parse_message(body: bytes, received_at: float | None = None) -> WebhookMessage:
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PayloadError("not_json", str(e)[:200]) from None
    except RecursionError:  # a v4 message is 4 levels deep; the parser gives up near 1000
        raise PayloadError("too_deep", "JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise PayloadError("not_object", f"top level is {type(doc).__name__}")
    if doc.get("version") != "4":
        raise PayloadError("bad_version", f"version={doc.get('version')!r}, expected '4'")
    alerts = _field(doc, "alerts", list)
    if len(alerts) > MAX_ALERTS:
        raise PayloadError("too_many_alerts", f"{len(alerts)} alerts > {MAX_ALERTS}")
    receiver = _text(doc, "receiver", "")
    group_key = _text(doc, "groupKey", "")
    status = _status(doc, "status")
    at = time.time() if received_at is None else received_at
    events = [_alert(a, i, receiver, group_key, at) for i, a in enumerate(alerts)]
    return WebhookMessage(receiver=receiver, status=status, group_key=group_key, alerts=events)


def _alert(a: Any, i: int, receiver: str, group_key: str, at: float) -> AlertEvent:
    where = f"alerts[{i}]"
    if not isinstance(a, dict):
        raise PayloadError("bad_type", f"{where} is {type(a).__name__}, expected object")
    labels = _mapping(a, "labels", where)
    if "alertname" not in labels:
        raise PayloadError("missing_field", f"{where}.labels.alertname")
    starts_at = _time(a, "startsAt", where, required=True)
    fingerprint = _text(a, "fingerprint", "", where) or _fingerprint(labels)
    return AlertEvent(
        status=_status(a, "status", where),
        labels=labels,
        annotations=_mapping(a, "annotations", where, required=False),
        starts_at=starts_at,
        ends_at=_time(a, "endsAt", where, required=False),
        fingerprint=fingerprint,
        generator_url=_text(a, "generatorURL", "", where),
        receiver=receiver,
        group_key=group_key,
        received_at=at,
    )


def _field(d: dict, key: str, kind: type, where: str = "") -> Any:
    name = f"{where}.{key}" if where else key
    if key not in d:
        raise PayloadError("missing_field", name)
    if not isinstance(d[key], kind):
        raise PayloadError("bad_type", f"{name} is {type(d[key]).__name__}, expected {kind.__name__}")
    return d[key]


def _text(d: dict, key: str, default: str, where: str = "") -> str:
    v = d.get(key, default)
    name = f"{where}.{key}" if where else key
    if v is None:
        return default
    if not isinstance(v, str):
        raise PayloadError("bad_type", f"{name} is {type(v).__name__}, expected string")
    if len(v) > MAX_TEXT:
        raise PayloadError("too_long", f"{name} has {len(v)} characters > {MAX_TEXT}")
    return v


def _status(d: dict, key: str, where: str = "") -> str:
    v = _field(d, key, str, where)
    if v not in _STATUSES:
        raise PayloadError(
            "bad_status", f"{where + '.' if where else ''}{key}={v[:50]!r}, expected firing|resolved"
        )
    return v


def _mapping(d: dict, key: str, where: str, required: bool = True) -> dict[str, str]:
    if key not in d and not required:
        return {}
    m = _field(d, key, dict, where)
    if len(m) > MAX_LABELS:
        raise PayloadError("too_many_labels", f"{where}.{key} has {len(m)} entries > {MAX_LABELS}")
    for k, v in m.items():
        if not isinstance(v, str):
            raise PayloadError("bad_type", f"{where}.{key}.{k} is {type(v).__name__}, expected string")
        if len(v) > MAX_TEXT or len(k) > 256:
            raise PayloadError("too_long", f"{where}.{key}.{k[:50]} is too long")
    return dict(m)


def _time(d: dict, key: str, where: str, required: bool) -> str:
    if key not in d and not required:
        return ""
    v = _field(d, key, str, where)
    if not _TIME.match(v):
        raise PayloadError("bad_time", f"{where}.{key}={v[:50]!r} is not an RFC 3339 time")
    return v


def _fingerprint(labels: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(labels.items())).encode()).hexdigest()[:16]
