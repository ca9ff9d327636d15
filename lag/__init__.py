"""Consumer lag collector: lag in messages and seconds with an explained status.

* :mod:`.rules` — pure status rules (OK / WARN / STALL / STOP / REWIND / ERR) over a window.
* :mod:`.timestamps` — the record timestamp at a committed offset, and the offset→time history
  used when that record cannot be read.
* :mod:`.collector` — one evaluation pass over every group with few admin calls.
* :mod:`.outputs` — Prometheus metrics, ``ConsumerLag`` samples, findings on status change.
* :mod:`.lease` — which of two collector instances publishes findings.
* :mod:`.coldread` — page-cache window per broker and the cold-read risk rule.
* :mod:`.rack` — rack spread, under-replicated and offline partitions.
* :mod:`.runner` — run the collector in a thread (for the demo and the command).
"""
