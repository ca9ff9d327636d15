"""Config loading shared by every command: one YAML file, validated at load, env overrides.

Each subsystem defines its own pydantic model (subclass :class:`StrictModel`) next to the code
that reads it, with defaults there. :func:`load_config` reads YAML, applies environment
overrides ``<PREFIX><KEY>__<SUBKEY>=value`` (verbatim for text settings — str, secret, path —
parsed as YAML scalars otherwise), validates, and on any problem raises
:class:`~linkwatch.errors.ConfigError` whose message names every bad key, its value (shortened;
secrets hidden) and why. Unknown keys are errors (a typo must not silently fall back to a
default). Any input gets an answer in bounded time and memory: see :data:`MAX_FILE_BYTES`,
:data:`MAX_DEPTH`, :data:`MAX_VALUES`. Path settings use :data:`FileLocation` /
:data:`DirLocation`, checked at load so ``--check`` catches a path that cannot work.
"""

from __future__ import annotations

import logging
import os
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, SecretStr, ValidationError

from linkwatch.errors import ConfigError

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger(__name__)

# Bounds on what a config document may be, so any file gives an answer in bounded time and
# memory: its size, its nesting, and the number of values after YAML aliases are expanded
# (an "anchor bomb" of a few lines expands to billions).
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_VALUES = 100_000
_SUBKEY = re.compile(r"^[a-z_][a-z0-9_]*: ")  # a section check's message about one of its keys
MAX_SHOWN = 80  # characters of an offending value quoted in an error message


class StrictModel(BaseModel):
    """Base for config sections: unknown keys rejected, values immutable after load."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _path_text(v: Any) -> Any:
    # Path("") is Path("."): an empty setting must fail here, before it becomes the cwd.
    if isinstance(v, str) and not v.strip():
        raise ValueError("must not be empty")
    if isinstance(v, str | Path) and "\x00" in str(v):
        raise ValueError("must not contain a NUL byte")
    return v


def _file(v: Path) -> Path:
    try:
        if v.is_dir():
            raise ValueError("is a directory, expected a file")
        if v.parent.exists() and not v.parent.is_dir():
            raise ValueError(f"{_shown(str(v.parent))} is not a directory")
    except OSError as e:
        raise ValueError(f"cannot be checked ({e.strerror})") from None
    return v


def _dir(v: Path) -> Path:
    try:
        if v.exists() and not v.is_dir():
            raise ValueError("exists and is not a directory")
        # It can be created only under a directory: the nearest existing ancestor must be one.
        above = next((p for p in v.absolute().parents if p.exists()), None)
        if above is not None and not above.is_dir():
            raise ValueError(f"cannot be created: {_shown(str(above))} is not a directory")
    except OSError as e:
        raise ValueError(f"cannot be checked ({e.strerror})") from None
    return v


#: A file the program reads or writes: not empty, not a directory, its parent (if it exists)
#: a directory. It need not exist yet (a log not yet created, a file written at run time).
FileLocation = Annotated[Path, BeforeValidator(_path_text), AfterValidator(_file)]
#: A directory the program uses or creates: not empty, not an existing non-directory.
DirLocation = Annotated[Path, BeforeValidator(_path_text), AfterValidator(_dir)]


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that stops at :data:`MAX_DEPTH` levels of nesting (before the parser's
    cost grows with the depth) and refuses merge keys (``<<``) expanding past
    :data:`MAX_VALUES` pairs: merges copy, so a chain of them grows exponentially."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        super().flatten_mapping(node)
        if len(node.value) > MAX_VALUES:
            raise yaml.constructor.ConstructorError(
                None, None, f"more than {MAX_VALUES} keys after merging (<<)", node.start_mark
            )


def rename_keys(data: Any, renames: dict[str, str], section: str = "") -> Any:
    """Move deprecated keys to their new place, for a ``model_validator(mode="before")``.

    ``renames`` maps an old dotted key to its new one (``"bootstrap_servers"`` →
    ``"kafka.bootstrap_servers"``), relative to the section validated; ``section`` prefixes both
    in messages. Each old key found logs one warning line. Old and new both set is a ValueError
    naming both. Anything but a mapping is returned as given (the validator then rejects it).
    """
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for old, new in renames.items():
        found, value = _pop_dotted(data, old.split("."))
        if not found:
            continue
        where = f"{section}." if section else ""
        if _has_dotted(data, new.split(".")):
            raise ValueError(
                f"{where}{old} is the deprecated spelling of {where}{new}: set only {where}{new}"
            )
        _set_dotted(data, new.split("."), value)
        log.warning(
            "config: %s%s is deprecated, use %s%s (the old spelling goes in a later release)",
            where,
            old,
            where,
            new,
        )
    return data


def _pop_dotted(data: dict[str, Any], path: list[str]) -> tuple[bool, Any]:
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            return False, None
        node[part] = child = dict(child)  # never change the caller's mapping
        node = child
    if path[-1] not in node:
        return False, None
    return True, node.pop(path[-1])


def _has_dotted(data: dict[str, Any], path: list[str]) -> bool:
    node: Any = data
    for part in path:
        if isinstance(node, BaseModel):
            node = node.model_dump(exclude_unset=True)
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _set_dotted(data: dict[str, Any], path: list[str], value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if isinstance(child, BaseModel):
            child = child.model_dump(exclude_unset=True)
        node[part] = child = dict(child) if isinstance(child, dict) else {}
        node = child
    node[path[-1]] = value


def load_config(path: Path | str | None, model: type[M], env_prefix: str = "LINKWATCH_") -> M:
    source = str(path)[:200] if path else "<defaults>"
    data: dict[str, Any] = {}
    if path is not None:
        loaded = _parse(_read(Path(path), source), source)
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(source, [f"the top level must be a mapping, got {type(loaded).__name__}"])
        _check_size(loaded, source, "")
        data = loaded
    _apply_env(data, env_prefix, os.environ, model)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(source, [describe(err, model) for err in e.errors()[:20]]) from None
    except RecursionError:
        raise ConfigError(source, ["nested too deeply"]) from None


def _read(path: Path, source: str) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError(source, [f"cannot read the file ({e.strerror})"]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(source, [f"larger than {MAX_FILE_BYTES} bytes: not a config file"])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        byte = raw[e.start : e.start + 1].hex()
        raise ConfigError(source, [f"not UTF-8 text (byte 0x{byte} at offset {e.start})"]) from None


def _parse(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ConfigError(source, [f"not valid YAML ({_shown(str(e), 300)})"]) from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise ConfigError(source, [f"not a usable value ({_shown(str(e), 200)})"]) from None


def _check_size(doc: Any, source: str, where: str) -> None:
    """Walk the document as the validator would, aliases expanded, within the bounds."""
    budget = [MAX_VALUES]

    def walk(node: Any, key: str, depth: int) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            raise ConfigError(
                source, [f"{key or '<top>'}: more than {MAX_VALUES} values (YAML aliases expanded)"]
            )
        if depth > MAX_DEPTH:
            raise ConfigError(source, [f"{key or '<top>'}: nested deeper than {MAX_DEPTH} levels"])
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{key}.{_shown(str(k), 40)}" if key else _shown(str(k), 40), depth + 1)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]", depth + 1)

    walk(doc, where, 0)


def _apply_env(data: dict[str, Any], prefix: str, environ: Any, model: type[BaseModel] | None = None) -> None:
    """``<PREFIX>A__B=value`` sets ``a.b``. A text setting (str, secret, path) takes the value
    verbatim; any other is parsed as a YAML scalar (``9500`` an int, ``true`` a bool)."""
    for name, raw in environ.items():
        if not name.startswith(prefix) or name == prefix:
            continue
        path = [part.lower() for part in name[len(prefix) :].split("__")]
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"${name}", [f"{'.'.join(path)}: cannot override inside a scalar"])
        if model is not None and _is_text(_annotation(model, path)):
            node[path[-1]] = raw
            continue
        try:
            value = _parse(raw, f"${name}")
        except ConfigError:
            value = raw
        _check_size(value, f"${name}", ".".join(path))
        node[path[-1]] = value


def _annotation(model: type[BaseModel], loc: list[str] | tuple[Any, ...]) -> Any:
    """The type of the field at ``loc`` (through nested models), or None if there is none."""
    annotation: Any = model
    for part in loc:
        inner = [a for a in _members(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not inner or not isinstance(part, str) or part not in inner[0].model_fields:
            return None
        annotation = inner[0].model_fields[part].annotation
    return annotation


def _members(annotation: Any) -> list[Any]:
    """The types a (possibly Optional / Annotated / union) annotation is made of."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [m for a in typing.get_args(annotation) for m in _members(a)]
    return [annotation]


def _is_text(annotation: Any) -> bool:
    members = [m for m in _members(annotation) if m is not type(None)]
    return bool(members) and all(m in (str, SecretStr, Path) for m in members)


def _shown(text: str, limit: int = MAX_SHOWN) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def describe(err: Any, model: type[BaseModel] | None = None) -> str:
    """One pydantic error as ``key=value: why`` (``key: unknown key``, ``key: required``)."""
    key = ".".join(str(p) for p in err["loc"]) or "<top>"
    if err["type"] == "extra_forbidden":
        return f"{key}: unknown key"
    if err["type"] == "missing":
        return f"{key}: required"
    if err["type"] == "value_error" and isinstance(err.get("input"), dict | list):
        # A section's own check: its message names keys inside the section ("sub_key: why").
        parts = str(err["msg"]).removeprefix("Value error, ").split("; ")
        return "; ".join(f"{key}.{p}" if _SUBKEY.match(p) else f"{key}: {p}" for p in parts)
    secret = model is not None and SecretStr in _members(_annotation(model, err["loc"]))
    shown = "<hidden>" if secret else _short_repr(err.get("input"))
    return f"{key}={shown}: {err['msg']}"


def _short_repr(value: Any) -> str:
    """repr() of a value bounded in time: containers are summarised, not walked."""
    if isinstance(value, dict | list | tuple | set):
        return f"<{type(value).__name__} of {len(value)}>"
    if isinstance(value, str | bytes) and len(value) > MAX_SHOWN:
        return f"{value[:MAX_SHOWN]!r}... ({len(value)} characters)"
    try:
        return _shown(repr(value))
    except ValueError:  # an int too long to convert
        return f"<{type(value).__name__}>"
