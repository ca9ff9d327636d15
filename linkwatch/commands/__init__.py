"""Subcommands of the ``linkwatch`` CLI, one module each, each exposing ``app``."""

import signal
import threading


def stop_on_signals() -> threading.Event:
    """An event set on SIGTERM or SIGINT: a long-running command's loop ends on it and then
    cleans up (instead of being killed mid-step)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return stop
