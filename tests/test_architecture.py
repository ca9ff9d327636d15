"""The import floors (core, findings, subsystems, testbed and CLI): the tree keeps them, the
picture in docs/architecture.md is current, and the checker catches each way of breaking them."""

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
    assert sorted(wheel["packages"]) == import_graph.packages(ROOT)


def test_each_floor_holds_what_it_says() -> None:
    floors = {p: import_graph.floor(p) for p in import_graph.packages(ROOT)}
    assert {p for p, f in floors.items() if f != "subsystem"} == {"linkwatch", "findings", "testbed", "cli"}
    assert floors["linkwatch"] == "core" and floors["findings"] == "findings"
    assert floors["testbed"] == floors["cli"] == "top"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for pkg in ("linkwatch", "findings", "testbed", "cli", "cli/commands", "agent", "lag", "tests"):
        (root / pkg).mkdir(parents=True, exist_ok=True)
        (root / pkg / "__init__.py").write_text("")
    for name, text in files.items():
        (root / name).write_text(text)
    return root


CASES = [
    # (id, files, expected violations)
    ("subsystem imports core", {"lag/run.py": "from linkwatch.records import X\n"}, []),
    ("subsystem imports findings", {"lag/run.py": "from findings.pipeline import FindingPipeline\n"}, []),
    ("findings imports core", {"findings/policy.py": "from linkwatch.records import Finding\n"}, []),
    (
        "cli imports testbed",
        {"cli/commands/lag.py": "from testbed import demo\nimport lag.run\n"},
        [],
    ),
    ("testbed imports subsystem", {"testbed/demo.py": "from agent import runner\n"}, []),
    ("tests are no floor", {"tests/test_x.py": "from testbed import cluster\n"}, []),
    (
        "core imports subsystem lazily",
        {"linkwatch/records.py": "def f():\n    from lag.run import g\n"},
        ["linkwatch (core) imports lag (subsystem), a floor above it"],
    ),
    (
        "core imports findings",
        {"linkwatch/config.py": "from findings.tracker import FindingTracker\n"},
        ["linkwatch (core) imports findings (findings), a floor above it"],
    ),
    (
        "core imports testbed",
        {"linkwatch/config.py": "import testbed\n"},
        ["linkwatch (core) imports testbed (top), a floor above it"],
    ),
    (
        "findings imports a subsystem lazily",
        {"findings/pipeline.py": "def build():\n    from lag.run import collector\n"},
        ["findings (findings) imports lag (subsystem), a floor above it"],
    ),
    (
        "subsystem imports testbed",
        {"agent/run.py": "from testbed.cluster import ClusterState\n"},
        ["agent (subsystem) imports testbed (top), a floor above it"],
    ),
    (
        "subsystem imports cli",
        {"lag/run.py": "from cli.main import main\n"},
        ["lag (subsystem) imports cli (top), a floor above it"],
    ),
    (
        "loop between subsystems",
        {"agent/a.py": "import lag.b\n", "lag/b.py": "from agent import a\n"},
        ["packages importing each other in a loop: agent, lag"],
    ),
    (
        "loop between testbed and cli",
        {"testbed/a.py": "from cli import main\n", "cli/main.py": "import testbed.a\n"},
        ["packages importing each other in a loop: cli, testbed"],
    ),
]


@pytest.mark.parametrize(("files", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_broken_floors_are_caught(tmp_path: Path, files: dict[str, str], expected: list[str]) -> None:
    graph = import_graph.build_graph(_tree(tmp_path, files))
    assert import_graph.violations(graph) == expected
