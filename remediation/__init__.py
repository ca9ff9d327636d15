"""Acting on findings: remediations with guardrails.

* :mod:`remediation.base` — the contract (plan / execute one step / verify / undo / recover),
  plan and step records, and the no-op default.
* :mod:`remediation.registry` — remediations by name from the entry-point group
  ``linkwatch.remediations`` (built-ins registered the same way).
* :mod:`remediation.config` — the remediator's config, validated at load.
* :mod:`remediation.intake` — the boundary: findings are untrusted; every field a guardrail or a
  plan reads is checked once, a finding that fails is dropped with a reason.
* :mod:`remediation.guardrails` — pure rules: breaker, dedup, circuit breaker, cooldown, caps.
* :mod:`remediation.impact` — the impact guard: health signals before, during and after an action.
* :mod:`remediation.audit` — the append-only audit log (JSON lines).
* :mod:`remediation.state` — persisted execution state: in the cluster (a compacted topic written
  in fenced transactions) or a local file.
* :mod:`remediation.lease` — one acting remediator per cluster (Kafka group membership); its
  topic is the holder's command inbox.
* :mod:`remediation.fencing` — every change to the cluster proves the lease first.
* :mod:`remediation.control` — operator commands through the acting remediator;
  :mod:`remediation.status` — what ``remediate status`` shows.
* :mod:`remediation.failpoints` — named places a test can freeze the process at.
* :mod:`remediation.view` — a fresh, read-only view of the cluster; throttle and move helpers.
* built-ins: :mod:`remediation.demote`, :mod:`remediation.rebalance` (planner + pipeline
  executor), :mod:`remediation.cancel`, :mod:`remediation.throttle`.
* :mod:`remediation.load` — ``rebalance_load``, the load-balance planner (H1 move, H2 propose, H3 revert).
* :mod:`remediation.remediator` — :class:`Remediator`: takes a finding, applies the guardrails,
  plans, and (only with ``execute: true``) acts; the one entry point for finding sources.
* :mod:`remediation.service` — builds it from config and runs the findings loop.
"""
