"""Acting on findings: remediations with guardrails.

* :mod:`remediation.base` — the contract (plan / execute one step / verify / undo / recover),
  plan and step records, and the no-op default.
* :mod:`remediation.registry` — remediations by name from the entry-point group
  ``linkwatch.remediations`` (built-ins registered the same way).
* :mod:`remediation.config` — the remediator's config, validated at load.
* :mod:`remediation.guardrails` — pure rules: cooldown, caps, circuit breaker, dedup.
* :mod:`remediation.audit` — the append-only audit log (JSON lines).
* :mod:`remediation.state` — persisted execution state (what is in flight, which throttles are ours).
* :mod:`remediation.lease` — one acting remediator per cluster (Kafka group membership).
* :mod:`remediation.view` — a fresh, read-only view of the cluster; throttle and move helpers.
* built-ins: :mod:`remediation.demote`, :mod:`remediation.rebalance` (planner + pipeline
  executor), :mod:`remediation.cancel`, :mod:`remediation.throttle`.
* :mod:`remediation.load` — ``rebalance_load``, the load-balance planner (H1 move, H2 propose, H3 revert).
* :mod:`remediation.remediator` — :class:`Remediator`: takes a finding, applies the guardrails,
  plans, and (only with ``execute: true``) acts; the one entry point for finding sources.
"""
