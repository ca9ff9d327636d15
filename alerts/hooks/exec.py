"""``exec`` notifier: run a program with a fixed argument list per alert event.

Options: ``argv`` (list of strings, required, from config only), ``timeout_s`` (default 10),
``env`` (extra static variables). The alert never becomes part of a command line: the program
gets it as JSON on stdin and as environment variables ``LINKWATCH_ALERT_STATUS``,
``LINKWATCH_ALERT_NAME``, ``LINKWATCH_ALERT_FINGERPRINT``, ``LINKWATCH_ALERT_LABEL_<NAME>`` and
``LINKWATCH_ALERT_ANNOTATION_<NAME>`` (names upper-cased, non-alphanumerics as ``_``). No shell
is involved (``subprocess`` with an argument list), so shell metacharacters in alert text are
just bytes. A non-zero exit or a timeout is FAILED.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from alerts.hooks.base import AlertEvent, HookResult, Notifier
from linkwatch.config import StrictModel
from linkwatch.errors import ConfigError

MAX_VALUE_BYTES = 4096  # per environment variable; longer alert text is cut


def _env_name(prefix: str, key: str) -> str:
    return prefix + re.sub(r"[^A-Za-z0-9]", "_", key).upper()


class ExecOptions(StrictModel):
    argv: list[str]
    timeout_s: float = 10.0
    env: dict[str, str] = Field(default_factory=dict)


class ExecNotifier(Notifier):
    name = "exec"
    Options = ExecOptions

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        argv = self.options.get("argv")
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) and a for a in argv)):
            raise ConfigError("hooks[exec]", [f"options.argv={argv!r}: must be a non-empty list of strings"])
        self.argv: list[str] = list(argv)
        self.timeout_s = float(self.options.get("timeout_s", 10.0))
        if not 0 < self.timeout_s <= 300:
            raise ConfigError("hooks[exec]", [f"options.timeout_s={self.timeout_s}: must be in (0, 300]"])
        self.extra_env = {str(k): str(v) for k, v in dict(self.options.get("env", {})).items()}

    def environment(self, event: AlertEvent) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **self.extra_env}
        env["LINKWATCH_ALERT_STATUS"] = event.status
        env["LINKWATCH_ALERT_NAME"] = event.alertname
        env["LINKWATCH_ALERT_FINGERPRINT"] = event.fingerprint
        for k, v in event.labels.items():
            env[_env_name("LINKWATCH_ALERT_LABEL_", k)] = v[:MAX_VALUE_BYTES]
        for k, v in event.annotations.items():
            env[_env_name("LINKWATCH_ALERT_ANNOTATION_", k)] = v[:MAX_VALUE_BYTES]
        return {k: v.replace("\x00", "") for k, v in env.items()}

    def handle(self, event: AlertEvent) -> HookResult:
        try:
            done = subprocess.run(
                self.argv,
                input=json.dumps(event.to_dict()).encode(),
                env=self.environment(event),
                capture_output=True,
                timeout=self.timeout_s,
                check=False,
                shell=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return HookResult.FAILED
        return HookResult.DONE if done.returncode == 0 else HookResult.FAILED
