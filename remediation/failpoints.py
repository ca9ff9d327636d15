"""Failpoints: named places where a test can freeze this process (as a long GC pause would).

``LINKWATCH_FAILPOINTS=<dir>`` arms them: when the process reaches a point and a file
of that name exists in ``<dir>``, the file is removed and the process sends itself SIGSTOP (the
test resumes it with SIGCONT). Unset — always, outside tests — :func:`failpoint` returns at once.
A test arms a point right before the phase it drives, so it freezes the process exactly there.
Points:

* ``after_plan`` — a plan made, before the finding is recorded and the action written;
* ``after_intent`` — a step written ``intent``, before it is executed;
* ``before_fence`` / ``before_call`` — inside a change to the cluster, before the fencing check /
  between the check and the call (:mod:`remediation.fencing`);
* ``in_verify`` — a step sent, before waiting for it to take effect;
* ``in_settle`` — an action done, its impact watched (:meth:`Remediator.tick`).

Like etcd's gofail or TiKV's fail-rs: the points stay in the code so the frozen-holder cases
can be driven on a real cluster at every point of an action, not only where a signal happens
to land.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path

log = logging.getLogger(__name__)

# Not LINKWATCH_REMEDIATION_*: that prefix is the config's environment overrides.
ENV = "LINKWATCH_FAILPOINTS"


def failpoint(name: str) -> None:
    armed = os.environ.get(ENV)
    if not armed:
        return
    trigger = Path(armed) / name
    try:
        trigger.unlink()
    except FileNotFoundError:
        return
    except OSError:
        return
    log.warning("failpoint %s: stopping this process (SIGSTOP)", name)
    with contextlib.suppress(OSError):
        os.kill(os.getpid(), signal.SIGSTOP)
