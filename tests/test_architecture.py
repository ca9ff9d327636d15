"""The import floors (core, subsystems, harness and CLI): the tree keeps them, the picture in
docs/architecture.md is current, and the checker catches each way of breaking them."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
assert _spec is not None and _spec.loader is not None
import_graph = importlib.util.module_from_spec(_spec)
sys.modules["import_graph"] = import_graph
_spec.loader.exec_module(import_graph)


def test_the_tree_keeps_its_floors() -> None:
    assert import_graph.violations(import_graph.build_graph()) == []


def test_the_picture_in_the_docs_is_current() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert import_graph.replace_block(doc, import_graph.render(import_graph.build_graph())) == doc, (
        "run: python scripts/import_graph.py --write"
    )


def test_every_package_ships_in_the_wheel() -> None:
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert sorted(wheel["packages"]) == sorted(["linkwatch", *import_graph.subsystems(ROOT)])


def _tree(root: Path, files: dict[str, str]) -> Path:
    for pkg in ("linkwatch", "linkwatch/testbed", "linkwatch/commands", "agent", "lag", "tests"):
        (root / pkg).mkdir(parents=True, exist_ok=True)
        (root / pkg / "__init__.py").write_text("")
    for name, text in files.items():
        (root / name).write_text(text)
    return root


CASES = [
    # (id, files, expected violations)
    ("subsystem imports core", {"lag/run.py": "from linkwatch.records import X\n"}, []),
    (
        "cli imports harness",
        {"linkwatch/commands/lag.py": "from linkwatch.testbed import demo\nimport lag.run\n"},
        [],
    ),
    ("harness imports subsystem", {"linkwatch/testbed/demo.py": "from agent import runner\n"}, []),
    ("tests are no floor", {"tests/test_x.py": "from linkwatch.testbed import cluster\n"}, []),
    (
        "core imports subsystem lazily",
        {"linkwatch/records.py": "def f():\n    from lag.run import g\n"},
        ["the core (linkwatch) imports lag (subsystem)"],
    ),
    (
        "core imports harness",
        {"linkwatch/config.py": "from linkwatch import testbed\n"},
        ["the core (linkwatch) imports linkwatch.testbed (top)"],
    ),
    (
        "core imports harness, relative",
        {"linkwatch/config.py": "from .testbed import cluster\n"},
        ["the core (linkwatch) imports linkwatch.testbed (top)"],
    ),
    (
        "subsystem imports harness",
        {"agent/run.py": "from linkwatch.testbed.cluster import ClusterState\n"},
        ["subsystem agent imports linkwatch.testbed (harness/CLI)"],
    ),
    (
        "subsystem imports cli",
        {"lag/run.py": "from linkwatch.cli import main\n"},
        ["subsystem lag imports linkwatch.cli (harness/CLI)"],
    ),
    (
        "loop between subsystems",
        {"agent/a.py": "import lag.b\n", "lag/b.py": "from agent import a\n"},
        ["packages importing each other in a loop: agent, lag"],
    ),
]


@pytest.mark.parametrize(("files", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_broken_floors_are_caught(tmp_path: Path, files: dict[str, str], expected: list[str]) -> None:
    graph = import_graph.build_graph(_tree(tmp_path, files))
    assert import_graph.violations(graph) == expected
