"""Config loading shared by every command: one YAML file, validated at load, env overrides.

Each subsystem defines its own pydantic model (subclass :class:`StrictModel`) next to the code
that reads it, with defaults there. :func:`load_config` reads YAML, applies environment
overrides ``<PREFIX><KEY>__<SUBKEY>=value`` (values parsed as YAML scalars), validates, and on
any problem raises :class:`~linkwatch.errors.ConfigError` whose message names every bad key,
its value and why. Unknown keys are errors (a typo must not silently fall back to a default).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from linkwatch.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for config sections: unknown keys rejected, values immutable after load."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def load_config(path: Path | str | None, model: type[M], env_prefix: str = "LINKWATCH_") -> M:
    source = str(path) if path else "<defaults>"
    data: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise ConfigError(source, [f"cannot read the file ({e.strerror})"]) from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(source, [f"not valid YAML ({e})"]) from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(source, [f"the top level must be a mapping, got {type(loaded).__name__}"])
        data = loaded
    _apply_env(data, env_prefix, os.environ)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(source, [_describe(err) for err in e.errors()]) from None


def _apply_env(data: dict[str, Any], prefix: str, environ: os._Environ[str] | dict[str, str]) -> None:
    for name, raw in environ.items():
        if not name.startswith(prefix) or name == prefix:
            continue
        path = [part.lower() for part in name[len(prefix) :].split("__")]
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"${name}", [f"{'.'.join(path)}: cannot override inside a scalar"])
        try:
            node[path[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError:
            node[path[-1]] = raw


def _describe(err: Any) -> str:
    key = ".".join(str(p) for p in err["loc"]) or "<top>"
    if err["type"] == "extra_forbidden":
        return f"{key}: unknown key"
    if err["type"] == "missing":
        return f"{key}: required"
    return f"{key}={err.get('input')!r}: {err['msg']}"
