"""Config is validated at load; every message names the key, the value and why."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import Field

from linkwatch.config import DirLocation, FileLocation, StrictModel, load_config
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


def _bomb(levels: int = 9, key: str = "cluster") -> str:
    """The classic anchor bomb: a few hundred bytes that expand to 9**levels strings."""
    lines = ['- &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"- &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return f"{key}:\n" + "\n".join("  " + line for line in lines) + "\n"


def _merge_bomb(levels: int = 40) -> str:
    """Merge keys copy: each level doubles the keys of the one below (2**40 at the end)."""
    lines = ["x0: &x0 {a: 1, b: 2}"]
    lines += [f"x{i}: &x{i} {{<<: [*x{i - 1}, *x{i - 1}], k{i}: 1}}" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


# (id, file content, text the error must contain); each hung, exhausted memory or raised a
# traceback before the loader was bounded.
BOUNDED = [
    ("anchor-bomb", _bomb().encode(), "cluster["),
    ("anchor-bomb-size", _bomb().encode(), "more than 100000 values (YAML aliases expanded)"),
    ("anchor-bomb-in-a-section", _bomb(key="http").encode(), "http["),
    ("merge-bomb", _merge_bomb().encode(), "after merging"),
    ("deep-nesting", b"cluster: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested"),
    ("deep-mapping", b"cluster: " + b"{a: " * 50 + b"1" + b"}" * 50 + b"\n", "nested deeper than 32 levels"),
    ("huge-value", b"cluster: [" + b"x" * 900_000 + b"]\n", "cluster=<list of 1>"),
    ("huge-file", b"cluster: " + b"x" * (2 << 20) + b"\n", "larger than 1048576 bytes"),
    ("long-string", b"window_s: " + b"9" * 5000 + b"x\n", "(5001 characters)"),
    ("long-integer", b"window_s: " + b"9" * 5000 + b"\n", "not a usable value"),
    ("binary", bytes(range(256)) * 4, "not UTF-8 text (byte 0x80 at offset 128)"),
    ("nul-bytes", b"cluster: a\x00b\n", "not valid YAML"),
    ("utf-16", "cluster: a\n".encode("utf-16"), "not UTF-8 text"),
]


@pytest.mark.parametrize(("text", "message"), [b[1:] for b in BOUNDED], ids=[b[0] for b in BOUNDED])
def test_hostile_documents_get_a_bounded_error_naming_the_key(
    tmp_path: Path, text: bytes, message: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(text)
    # This thread's CPU time, not the wall clock: a bomb that is not bounded costs minutes of CPU,
    # and the worst bounded one here about 0.3 s; a loaded machine stretched the wall clock of a
    # bounded one past 2 s (deep-nesting: 2.5 s at a load average of 15 on 2 cores).
    started = time.thread_time()
    with pytest.raises(ConfigError) as info:
        load_config(path, Example)
    assert time.thread_time() - started < 2.0
    assert message in str(info.value)
    assert str(path) in str(info.value)
    assert len(str(info.value)) < 1000


def test_an_env_override_is_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LWTEST_WINDOW_S", "[" * 5000 + "]" * 5000)
    with pytest.raises(ConfigError, match="window_s"):
        load_config(None, Example, env_prefix="LWTEST_")


class Paths(StrictModel):
    log: FileLocation = Path("x.log")
    state: DirLocation = Path("state")
    optional: FileLocation | None = None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("log: ''", "log='': Value error, must not be empty"),
        ("log: '  '", "must not be empty"),
        ("log: {tmp}", "is a directory, expected a file"),
        ("log: {tmp}/file/x.log", "file is not a directory"),
        ("state: {tmp}/file", "state="),
        ("state: ''", "must not be empty"),
        ("optional: ''", "optional"),
        ("optional: {tmp}", "optional="),
        ("log: 5", "log=5"),
    ],
)
def test_paths_that_cannot_work_are_refused_at_load(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text.replace("{tmp}", str(tmp_path)) + "\n"), Paths)
    assert message in str(info.value)


def test_paths_that_can_work_load(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, f"log: {tmp_path}/new.log\nstate: {tmp_path}/new-dir\n"), Paths)
    assert (cfg.log, cfg.state, cfg.optional) == (tmp_path / "new.log", tmp_path / "new-dir", None)


# --- property: any document gets a model or a ConfigError naming a key, in bounded time ---

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_keys = st.sampled_from(["cluster", "http", "window_s", "port", "host", "extra"]) | st.text(max_size=8)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(doc=st.dictionaries(_keys, _values, max_size=5))
def test_any_mapping_loads_or_names_the_key(doc: dict) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.yaml"
        path.write_text(yaml.safe_dump(doc))
        try:
            load_config(path, Example)
        except ConfigError as e:
            assert e.problems
            keys = [str(k) for k in doc] + ["<top>"]
            for problem in e.problems:
                assert any(problem.startswith(k) for k in keys), problem
                assert len(problem) < 400


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(raw=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_load_or_give_one_bounded_error(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.yaml"
        path.write_bytes(raw)
        started = time.monotonic()
        try:
            load_config(path, Example)
        except ConfigError as e:
            assert str(path) in str(e) and len(str(e)) < 2000
        assert time.monotonic() - started < 1.0
