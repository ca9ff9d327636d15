"""Config is validated at load; every message names the key, the value and why."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field

from linkwatch.config import StrictModel, load_config
from linkwatch.errors import ConfigError


class Http(StrictModel):
    host: str = "127.0.0.1"
    port: int = Field(9404, ge=1, le=65535)


class Example(StrictModel):
    cluster: str = "local"
    http: Http = Http()
    window_s: int = Field(10, gt=0)


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_defaults_without_a_file() -> None:
    assert load_config(None, Example) == Example()


def test_env_override_with_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LWTEST_HTTP__PORT", "9500")
    cfg = load_config(_write(tmp_path, "cluster: prod\n"), Example, env_prefix="LWTEST_")
    assert (cfg.cluster, cfg.http.port) == ("prod", 9500)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("http:\n  port: 70000\n", "http.port=70000: Input should be less than or equal to 65535"),
        ("htp:\n  port: 1\n", "htp: unknown key"),
        ("window_s: -5\n", "window_s=-5: Input should be greater than 0"),
        ("window_s: ten\n", "window_s='ten'"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("http: [\n", "not valid YAML"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text), Example)
    assert message in str(info.value)
    assert str(tmp_path / "c.yaml") in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config(tmp_path / "nope.yaml", Example)
