"""Findings: their lifecycle, the decision about each, and the pipeline that acts on it.

The floor just above the core (it imports only ``linkwatch``); every finding source publishes
through it and ``remediation`` acts for it:

* :mod:`.tracker` — the one tracker of what is active (appeared / ongoing / cleared per rule and
  subject), for events one at a time and for whole evaluations;
* :mod:`.policy` — the one decision: IGNORE / NOTIFY / REMEDIATE / CHECK_LATER(delay), with the
  safety rules that only ever lower REMEDIATE to NOTIFY;
* :mod:`.pipeline` — track → decide → act: the dispatcher is the only caller of notifiers and of
  the remediator (found by name: entry point group ``linkwatch.remediators``).
"""
