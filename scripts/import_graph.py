#!/usr/bin/env python3
"""The imports between linkwatch's packages, drawn by floor, and the check that keeps the floors.

Floors, from the bottom; each top-level package of the repository sits on one:

* **core** — ``linkwatch`` (records, aggregates, sketches, config, errors …);
* **findings** — ``findings`` (the findings lifecycle, the policy, the pipeline);
* **subsystems** — every other top-level package (``agent``, ``analyzer``, ``lag``,
  ``remediation`` …);
* **top** — ``testbed`` (test cluster, load, faults, the demo) and ``cli`` (the command).

A package may import its own floor and the floors below it, never one above; the core and
``findings`` each are a floor of one package, so the core imports no other package and
``findings`` only the core. A floor is also broken when packages import each other in a loop.
Every import counts, also one inside a function. Standard library only (``ast``), so it runs
anywhere::

    python scripts/import_graph.py            # print the picture (Mermaid) and the import table
    python scripts/import_graph.py --write    # refresh it in docs/architecture.md
    python scripts/import_graph.py --check    # exit 1 naming each broken floor or a stale doc
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- import-graph:begin -->", "<!-- import-graph:end -->"
CORE = "linkwatch"
FINDINGS = "findings"
TOP = ("testbed", "cli")
NOT_PACKAGES = {"tests"}  # top-level packages that are not part of linkwatch
FLOORS = ("core", "findings", "subsystem", "top")  # bottom to top

Graph = dict[str, set[str]]  # package -> packages it imports


def packages(root: Path) -> list[str]:
    """Every top-level package of the repository (the tests excepted)."""
    return sorted(
        d.name for d in root.iterdir() if (d / "__init__.py").is_file() and d.name not in NOT_PACKAGES
    )


def subsystems(root: Path) -> list[str]:
    """The packages on the subsystems' floor."""
    return [p for p in packages(root) if floor(p) == "subsystem"]


def floor(package: str) -> str:
    if package == CORE:
        return "core"
    if package == FINDINGS:
        return "findings"
    if package in TOP:
        return "top"
    return "subsystem"


def package_of(module: str, known: list[str]) -> str | None:
    """The package a module belongs to in the picture (None: not ours, e.g. the stdlib)."""
    head = module.split(".")[0]
    return head if head in known else None


def modules(root: Path, packages: list[str]) -> Iterator[tuple[str, Path]]:
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imported(module: str, path: Path, known: set[str]) -> Iterator[str]:
    """Every module ``path`` imports, at any depth (a lazy import inside a function counts)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:  # `from linkwatch.testbed import demo` names a module
                sub = f"{base}.{alias.name}"
                yield sub if sub in known else base


def build_graph(root: Path = ROOT) -> Graph:
    pkgs = packages(root)
    found = list(modules(root, pkgs))
    known = {m for m, _ in found}
    graph: Graph = {p: set() for p in pkgs}
    for module, path in found:
        src = package_of(module, pkgs)
        for target in imported(module, path, known):
            dst = package_of(target, pkgs)
            if src is not None and dst is not None and dst != src:
                graph[src].add(dst)
    return graph


def loops(graph: Graph) -> list[list[str]]:
    """Groups of packages that import each other, directly or around a cycle (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def violations(graph: Graph) -> list[str]:
    """What breaks the floors, one sentence each (empty when the tree keeps them)."""
    out = []
    for src, targets in sorted(graph.items()):
        for dst in sorted(targets):
            if FLOORS.index(floor(dst)) > FLOORS.index(floor(src)):
                out.append(f"{src} ({floor(src)}) imports {dst} ({floor(dst)}), a floor above it")
    out += [f"packages importing each other in a loop: {', '.join(group)}" for group in loops(graph)]
    return out


def _node(package: str) -> str:
    return package.replace(".", "_")


def render(graph: Graph, root: Path = ROOT) -> str:
    """The Markdown block: a Mermaid picture by floor and the same imports as a table."""

    def stems(package: str) -> str:
        return ", ".join(sorted(p.stem for p in (root / package).glob("*.py") if p.stem != "__init__"))

    labels = {
        CORE: f"linkwatch (core): {stems(CORE)}",
        FINDINGS: f"findings: {stems(FINDINGS)}",
        "testbed": "testbed (test cluster, load, faults, demo)",
        "cli": "cli (the linkwatch command)",
    }
    titles = {"top": "testbed and CLI", "subsystem": "subsystems", "findings": "findings", "core": "core"}
    by_floor = {key: (titles[key], [p for p in sorted(graph) if floor(p) == key]) for key in reversed(FLOORS)}
    lines = ["```mermaid", "flowchart TB"]
    for key, (title, members) in by_floor.items():
        lines.append(f'  subgraph floor_{key}["{title}"]')
        lines += [f'    {_node(p)}["{labels.get(p, p)}"]' for p in members]
        lines.append("  end")
    for src in sorted(graph):
        lines += [f"  {_node(src)} --> {_node(dst)}" for dst in sorted(graph[src])]
    lines += ["```", "", "| package | floor | imports |", "|---|---|---|"]
    order = [p for _, members in by_floor.values() for p in members]
    for p in order:
        imports = ", ".join(f"`{d}`" for d in sorted(graph[p], key=order.index)) or "—"
        lines.append(f"| `{p}` | {floor(p)} | {imports} |")
    return "\n".join(lines) + "\n"


def replace_block(doc: str, block: str) -> str:
    head, sep, rest = doc.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise SystemExit(f"{DOC}: markers {BEGIN} / {END} not found")
    return f"{head}{BEGIN}\n{block}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"refresh the picture in {DOC.relative_to(ROOT)}")
    mode.add_argument("--check", action="store_true", help="exit 1 on a broken floor or a stale picture")
    args = parser.parse_args(argv)
    graph = build_graph()
    block = render(graph)
    if args.write:
        DOC.write_text(replace_block(DOC.read_text(), block))
    elif args.check:
        problems = violations(graph)
        if replace_block(DOC.read_text(), block) != DOC.read_text():
            problems.append(f"{DOC.relative_to(ROOT)} is stale: run python scripts/import_graph.py --write")
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    else:
        print(block, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
