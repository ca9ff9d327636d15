"""The analyzer's extension points; these docstrings are the contract.

Three steps, kept apart:

* **detect** — a :class:`Detector` is a pure function of aggregated rows
  (:class:`linkwatch.aggregates.Aggregates`, produced by ``spark_metrics``), its thresholds (its
  ``Config``) and the current time. It returns :class:`~linkwatch.records.Finding` records and
  nothing else: no I/O, no clock, no state kept between calls (scores over consecutive windows
  are recomputed from the windows it is given, so a restart reproduces the same findings from
  the same data). Optionally it also exports gauges (:attr:`Detector.gauges`) and says what the
  batch report draws for it (:meth:`Detector.charts`), so no other module special-cases one
  detector.
* **decide** — the one findings policy (:mod:`findings.policy`) maps each finding to a verdict;
  the analyzer's own ``policy:`` section (:class:`~findings.policy.SeverityPolicyConfig`:
  alert / check later / ignore by severity and rule) chooses what reaches its sinks.
* **act** — only the engine hands the findings to notify to sinks (Kafka topic, Prometheus,
  terminal). Remediation is a separate subsystem and never runs from a detector: findings reach
  it through the findings pipeline (:mod:`findings.pipeline`).

Detectors are plugins registered as entry points in group :data:`DETECTOR_GROUP`; the
built-ins are registered the same way (see ``pyproject.toml``) and chosen by name in config.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, cast

from linkwatch.aggregates import Aggregates
from linkwatch.config import StrictModel
from linkwatch.records import Finding

DETECTOR_GROUP = "linkwatch.detectors"
SOURCE = "analyzer"
SEVERITIES = ("info", "warning", "critical")


# --- detect ---------------------------------------------------------------------------------


class DetectorConfig(StrictModel):
    """Base of every detector's thresholds; defaults live in the subclass beside the rule."""


C = TypeVar("C", bound=DetectorConfig)


@dataclass(frozen=True)
class DetectorGauge:
    """A gauge a detector exports besides its findings (``docs/metrics.md`` lists it)."""

    name: str
    documentation: str
    labels: tuple[str, ...]


# Values of a detector's gauges in one evaluation: gauge name -> label values (in the order of
# DetectorGauge.labels) -> value.
GaugeValues = dict[str, dict[tuple[str, ...], float]]


@dataclass(frozen=True)
class LineChart:
    """Values over time, one line per series (name -> [(epoch ms, value)]); ``threshold`` is
    drawn as a horizontal line."""

    title: str
    y_label: str
    series: Mapping[str, Sequence[tuple[int, float]]]
    threshold: float | None = None


@dataclass(frozen=True)
class BarChart:
    """One bar per name, e.g. the excess of each stage of a flagged broker."""

    title: str
    unit: str
    values: Mapping[str, float]


Chart = LineChart | BarChart


class Detector(ABC, Generic[C]):
    """A rule over aggregated rows, generic in its thresholds' type ``C`` (its :attr:`Config`).

    * ``__init__(config)`` only stores validated thresholds; it never connects or reads.
    * :meth:`detect` must be deterministic and side-effect free: the same ``data`` and
      ``now_ms`` give the same findings. It may return an empty list. It must tolerate missing
      rows (cold start, a broker that stopped reporting) by not firing, never by raising.
    * An exception from :meth:`detect` is a bug in that detector: the engine logs it, counts it
      and goes on with the other detectors.
    * Every finding has ``rule`` = :attr:`rule`, a ``subject`` (``broker:2``,
      ``topic-partition:orders-3``, ``topic:orders``, ``log_dir:1:/data/a``, ``cluster:<name>``),
      ``evidence`` with at least ``values``, ``baseline`` and ``windows``, a severity from
      :data:`SEVERITIES` and a suggested ``action`` in words.
    * Optional: :attr:`gauges` declares gauges the detector exports (e.g. a score per subject)
      and :meth:`measure` returns their values, under the same rules as :meth:`detect`. An
      exception from it is logged and counted by the engine; those gauges are then empty until
      the next evaluation.
    * Optional: :meth:`charts` says what the batch report draws for this detector; pure too.
    """

    name: ClassVar[str]
    rule: ClassVar[str]
    Config: ClassVar[type[DetectorConfig]] = DetectorConfig
    gauges: ClassVar[tuple[DetectorGauge, ...]] = ()

    def __init__(self, config: C | None = None) -> None:
        self.config: C = config if config is not None else cast(C, self.Config())

    @abstractmethod
    def detect(self, data: Aggregates, now_ms: int) -> list[Finding]: ...

    def measure(self, data: Aggregates, now_ms: int) -> GaugeValues:
        """Values of :attr:`gauges` at ``now_ms`` (a gauge left out is empty)."""
        return {}

    def charts(self, data: Aggregates, findings: Sequence[Finding]) -> list[Chart]:
        """What the batch report draws for this detector over ``data``'s range; ``findings``
        are the ones it reported in that range (the latest of each rule and subject)."""
        return []

    def finding(
        self,
        data: Aggregates,
        now_ms: int,
        *,
        subject: str,
        severity: str,
        summary: str,
        evidence: dict[str, Any],
        action: str,
        rule: str | None = None,
    ) -> Finding:
        assert severity in SEVERITIES, severity
        return Finding(
            cluster=data.cluster,
            source=SOURCE,
            ts_ms=now_ms,
            rule=rule or self.rule,
            subject=subject,
            severity=severity,
            summary=summary,
            evidence=evidence,
            action=action,
        )


# --- act (the only part with side effects) ---------------------------------------------------


class FindingSink(ABC):
    """Receives findings the policy chose to notify of (the analyzer's word: alert), and their
    clearing.

    ``emit`` gets a finding when it appears or changes, and the same finding with
    ``active=False`` when it clears. It may do I/O; it must not block for long (bounded
    timeouts) and its exceptions are logged by the engine without stopping other sinks.
    ``close`` flushes and releases resources.
    """

    @abstractmethod
    def emit(self, finding: Finding) -> None: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


class InMemorySink(FindingSink):
    """Records every emitted finding (for tests and the demo)."""

    def __init__(self) -> None:
        self.emitted: list[Finding] = []

    def emit(self, finding: Finding) -> None:
        self.emitted.append(finding)
