"""Hook options are validated like every other key: each hook's ``Options`` model refuses an
unknown key (``retires: 4``) and a bad value, at config load (so ``--check`` sees it) and when
the hook is built; the error names the hook and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from alerts.hooks import load_hook
from cli.main import main
from linkwatch.errors import ConfigError

BAD_OPTIONS = [
    # (hook, options, the problem the error names)
    ("webhook", {"url": "http://127.0.0.1:1/x", "retires": 4}, "options.retires: unknown key"),
    ("webhook", {"url": "http://127.0.0.1:1/x", "retries": "many"}, "options.retries='many'"),
    ("webhook", {}, "options.url: required"),
    ("exec", {"argv": ["true"], "timeout": 3}, "options.timeout: unknown key"),
    ("exec", {"argv": "true"}, "options.argv='true'"),
    ("memory", {"max_event": 10}, "options.max_event: unknown key"),
    ("log", {"level": "info"}, "options.level: unknown key"),
]


@pytest.mark.parametrize(("hook", "options", "problem"), BAD_OPTIONS)
def test_a_bad_option_stops_the_hook_naming_the_key(hook: str, options: dict, problem: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_hook(hook, options)
    assert str(e.value).startswith(f"hooks.{hook}: ") and problem in str(e.value)


@pytest.mark.parametrize(("hook", "options", "problem"), BAD_OPTIONS)
def test_alerts_serve_check_refuses_it(
    hook: str, options: dict, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "alerts.yml"
    cfg.write_text(f"token: t0ken\nhooks:\n  - type: {hook}\n    options: {options!r}\n")
    assert main(["alerts", "serve", "--check", "-c", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"hooks.0: hooks.{hook}: " in err and problem in err


def test_lag_check_refuses_a_notifier_option_typo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "lag.yaml"
    cfg.write_text(
        'bootstrap_servers: "127.0.0.1:9092"\nremediation:\n  notifiers:\n'
        '    - {type: webhook, options: {url: "http://127.0.0.1:1/x", retires: 4}}\n'
    )
    assert main(["lag", "check", "-c", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "remediation.notifiers.0: notifiers.webhook: options.retires: unknown key" in err


def test_good_options_get_their_defaults() -> None:
    hook = load_hook("webhook", {"url": "http://127.0.0.1:1/x"})
    assert dict(hook.options) == {
        "url": "http://127.0.0.1:1/x",
        "timeout_s": 5.0,
        "retries": 2,
        "backoff_s": 0.5,
        "headers": {},
    }
