"""The one findings policy: decide what happens to one finding. Pure; validated at load.

A finding maps to a :class:`Verdict`: IGNORE, NOTIFY, REMEDIATE or CHECK_LATER(delay). The
configured ``rules`` are tried in order, the first whose ``rule`` / ``severity`` / ``subject``
patterns (shell-style globs) all match wins; otherwise ``default``. Then the safety rules, which
only ever lower REMEDIATE to NOTIFY (each a small named function, the reason kept in the verdict):

* no remediation section configured → NOTIFY (nothing can act);
* a cluster-wide slowdown is active (``stand_down_rules``) → NOTIFY, unless the matching rule
  says ``allow_during_cluster_slow``;
* a severity below ``remediate_min_severity`` (a degraded finding) → NOTIFY, unless allowed;
* a slow broker whose excess is not in its own stages (``send``/``throttle``: a slow client;
  ``remote``: a follower) → NOTIFY, unless allowed; a finding about the stalled follower itself
  (``remote`` with ``slow_follower`` = the subject) is the broker's own and may be remediated, and
  so is ``unseen`` (its clients wait on it before its timers start: its process or its network
  path) when a family of evidence from its own request timings stands beside the probe's.

A rule with no match and no ``default`` override notifies, which keeps every finding reaching
the notifiers for unknown rules.

Two spellings of the same policy:

* :class:`FindingPolicyConfig` — the findings pipeline's ``remediation.policy`` section (rows);
* :class:`SeverityPolicyConfig` — the analyzer's own ``policy:`` section (``by_severity`` /
  ``by_rule``), which only chooses what reaches the analyzer's sinks when no pipeline runs; it
  is turned into rows by :meth:`SeverityPolicyConfig.as_policy` and decided by :func:`decide`
  like any other. Its word ``alert`` is :attr:`Action.NOTIFY`.
"""

from __future__ import annotations

import enum
import fnmatch
import re
from collections.abc import Collection
from dataclasses import dataclass

from pydantic import Field, model_validator

from linkwatch.config import StrictModel
from linkwatch.records import Finding

SEVERITIES = ("info", "warning", "critical")
# Stages whose excess is the broker's own work: moving its leadership away helps.
OWN_STAGES = ("requestQueue", "local", "responseQueue")
# The slow-broker finding's words for what only the probe sees, and for the probe's family of
# evidence (analyzer.blame's UNSEEN and PROBE; the findings floor does not import the analyzer).
UNSEEN_STAGE = "unseen"
PROBE_FAMILY = "probe"


class Action(enum.Enum):
    IGNORE = "ignore"
    NOTIFY = "notify"
    REMEDIATE = "remediate"
    CHECK_LATER = "check_later"

    @classmethod
    def _missing_(cls, value: object) -> Action | None:
        # The analyzer's policy has always called NOTIFY "alert"; its configs keep working.
        return cls.NOTIFY if value == "alert" else None


@dataclass(frozen=True)
class Verdict:
    """What to do with one finding, and why (the matching row, or the safety rule that refused)."""

    action: Action
    delay_s: float = 0.0  # only for CHECK_LATER
    reason: str = ""


class PolicyRule(StrictModel):
    """One row: which findings (globs; ``*`` matches all) get which action."""

    rule: str = "*"
    severity: str = "*"
    subject: str = "*"
    action: Action
    delay_s: float | None = Field(None, gt=0)  # CHECK_LATER only; default: policy.recheck_after_s
    # Override the safe defaults for this row (each off by default).
    allow_during_cluster_slow: bool = False
    allow_low_severity: bool = False
    allow_foreign_stage: bool = False

    @model_validator(mode="after")
    def _delay_only_for_check_later(self) -> PolicyRule:
        if self.delay_s is not None and self.action is not Action.CHECK_LATER:
            raise ValueError(f"delay_s is only for action check_later (action is {self.action.value})")
        return self

    def matches(self, f: Finding) -> bool:
        return all(
            fnmatch.fnmatchcase(value, pattern)
            for value, pattern in (
                (f.rule, self.rule),
                (f.severity, self.severity),
                (f.subject, self.subject),
            )
        )


def _default_rules() -> list[PolicyRule]:
    return [
        PolicyRule(rule="slow_broker", subject="broker:*", action=Action.REMEDIATE),
        PolicyRule(severity="info", action=Action.CHECK_LATER),
    ]


class FindingPolicyConfig(StrictModel):
    rules: list[PolicyRule] = Field(default_factory=_default_rules)
    default: Action = Action.NOTIFY
    recheck_after_s: float = Field(60.0, gt=0)
    remediate_min_severity: str = Field("warning", pattern="^(info|warning|critical)$")
    stand_down_rules: list[str] = Field(default_factory=lambda: ["cluster_slow"])

    @model_validator(mode="after")
    def _default_not_check_later(self) -> FindingPolicyConfig:
        if self.default is Action.CHECK_LATER:
            raise ValueError("default: check_later would re-check every finding forever; use a rule row")
        return self


# Rule 1 — nothing can act without a remediation section.
def no_remediator(can_remediate: bool) -> str | None:
    return None if can_remediate else "no remediation configured: notify only"


# Rule 2 — a cluster-wide slowdown: moving leadership or data would not help and may hurt.
def cluster_slow(
    active_rules: Collection[str], cfg: FindingPolicyConfig, row: PolicyRule | None
) -> str | None:
    hit = sorted(set(active_rules) & set(cfg.stand_down_rules))
    if hit and not (row and row.allow_during_cluster_slow):
        return f"cluster-wide finding active ({', '.join(hit)}): notify only"
    return None


# Rule 3 — a degraded (lower-severity) finding never moves anything by default.
def low_severity(f: Finding, cfg: FindingPolicyConfig, row: PolicyRule | None) -> str | None:
    rank = SEVERITIES.index(f.severity) if f.severity in SEVERITIES else -1
    if rank < SEVERITIES.index(cfg.remediate_min_severity) and not (row and row.allow_low_severity):
        return f"severity {f.severity} below remediate_min_severity {cfg.remediate_min_severity}: notify only"
    return None


def _is_stalled_follower(f: Finding) -> bool:
    """The analyzer's Rule 5 finding: leaders wait in ``remote`` on the subject broker itself
    (``slow_follower`` is the subject). Its own fault, unlike a leader waiting on another."""
    follower = f.evidence.get("slow_follower")
    return follower is not None and f.subject == f"broker:{follower}"


def _is_own_unseen(f: Finding) -> bool:
    """Stage ``unseen``: clients wait on the broker before its timers start (a stalled process,
    a slow path to it), seen by the probe. Its own when the evidence has a second family beside
    the probe's, from the broker's own request timings (its own replication wait, serving few,
    peers waiting on it): two views agree. The probe alone may be the probe's own path."""
    families = f.evidence.get("families")
    if not isinstance(families, list) or not all(isinstance(x, str) for x in families):
        return False
    return PROBE_FAMILY in families and len(set(families) - {PROBE_FAMILY}) >= 1


# Rule 4 — a slow broker whose excess is a client's (send/throttle) or another broker's (remote,
# a leader waiting on a follower; but a finding about the stalled follower itself is its own,
# and so is a corroborated unseen stall: its process or its path).
def foreign_stage(f: Finding, row: PolicyRule | None) -> str | None:
    if f.rule != "slow_broker" or (row and row.allow_foreign_stage):
        return None
    stage = f.evidence.get("stage")
    if stage == "remote" and _is_stalled_follower(f):
        return None
    if stage == UNSEEN_STAGE and _is_own_unseen(f):
        return None
    if stage not in OWN_STAGES:
        return f"excess in stage {stage!r}, not the broker's own ({', '.join(OWN_STAGES)}): notify only"
    return None


def decide(
    f: Finding, cfg: FindingPolicyConfig, *, can_remediate: bool, active_rules: Collection[str] = ()
) -> Verdict:
    """The verdict for ``f``; ``active_rules`` are the rules with an active finding now."""
    row = next((r for r in cfg.rules if r.matches(f)), None)
    action = row.action if row else cfg.default
    why = f"row {cfg.rules.index(row)}" if row else "default"
    if action is Action.CHECK_LATER:
        delay = row.delay_s if row and row.delay_s is not None else cfg.recheck_after_s
        return Verdict(action, delay, why)
    if action is not Action.REMEDIATE:
        return Verdict(action, 0.0, why)
    refusal = (
        no_remediator(can_remediate)
        or cluster_slow(active_rules, cfg, row)
        or low_severity(f, cfg, row)
        or foreign_stage(f, row)
    )
    return Verdict(Action.NOTIFY, 0.0, refusal) if refusal else Verdict(action, 0.0, why)


def _literal(name: str) -> str:
    """A glob that matches ``name`` only (``*``, ``?`` and ``[`` taken literally)."""
    return re.sub(r"([*?[])", r"[\1]", name)


class SeverityPolicyConfig(StrictModel):
    """The analyzer's ``policy:`` section: which findings reach its sinks (topic, /metrics,
    terminal) when no findings pipeline runs. By default warnings and criticals alert (notify),
    infos are checked later; ``by_rule`` overrides ``by_severity`` for a rule. The analyzer acts
    on nothing itself, so ``remediate`` is refused here (the ``remediation:`` section acts)."""

    by_severity: dict[str, Action] = Field(
        default_factory=lambda: {
            "info": Action.CHECK_LATER,
            "warning": Action.NOTIFY,
            "critical": Action.NOTIFY,
        }
    )
    by_rule: dict[str, Action] = Field(default_factory=dict)
    recheck_after_s: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _no_remediate(self) -> SeverityPolicyConfig:
        for key, table in (("by_rule", self.by_rule), ("by_severity", self.by_severity)):
            for name, action in table.items():
                if action is Action.REMEDIATE:
                    raise ValueError(
                        f"{key}.{name}: remediate is not an analyzer policy action "
                        "(ignore, alert, check_later); the remediation: section acts on findings"
                    )
        return self

    def as_policy(self) -> FindingPolicyConfig:
        """The same decisions as rows: each rule first, then each severity, else notify."""
        rows = [PolicyRule(rule=_literal(r), action=a) for r, a in self.by_rule.items()]
        rows += [PolicyRule(severity=_literal(s), action=a) for s, a in self.by_severity.items()]
        return FindingPolicyConfig(rules=rows, default=Action.NOTIFY, recheck_after_s=self.recheck_after_s)
