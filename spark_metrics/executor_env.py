"""What a Spark cluster's executors need of linkwatch, packed from this installation.

The executors' Python workers run linkwatch's code (the stage quantiles' ``mapInArrow`` body,
:mod:`spark_metrics.sketch_merge`, imports ``linkwatch.sketch`` → ``ddsketch`` and
``linkwatch.records`` → ``orjson``). A Spark cluster's Python has pyspark, pyarrow, numpy and
pandas; it does not have linkwatch or its other dependencies. :func:`pack` writes them, as
this interpreter has them installed, to one ``.tar.gz``:

* linkwatch's own packages (from the installed wheel, or the source tree of an editable
  install), and
* every distribution linkwatch's base install requires, transitively, except those the
  cluster brings (:data:`CLUSTER_PROVIDED`).

Shipped with ``spark-submit --archives <file>#linkwatch-env --conf
spark.executorEnv.PYTHONPATH=linkwatch-env`` (Spark unpacks the archive into each executor's
working directory; compiled modules such as orjson's load from there, which a ``--py-files``
zip cannot do). The executors' Python must be the same minor version and platform as this one:
the compiled modules are this interpreter's.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

DIST = "linkwatch"
# What the cluster's Python brings (pyspark's own Python requirements and what its Arrow paths
# need); never packed, so the cluster's versions are the ones used.
CLUSTER_PROVIDED = frozenset(
    ("pyspark", "py4j", "pyarrow", "numpy", "pandas", "python-dateutil", "pytz", "tzdata")
)
ARCHIVE_DIR = "linkwatch-env"


def _name(requirement: str) -> str:
    return re.split(r"[\s;\[<>=!~(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _base_requirements(dist: md.Distribution) -> list[str]:
    """Requirements of ``dist`` that hold without extras (``; extra == ...`` left out)."""
    return [r for r in dist.requires or [] if "extra ==" not in r.replace('extra=="', 'extra == "')]


def closure(root: str = DIST, provided: frozenset[str] = CLUSTER_PROVIDED) -> list[md.Distribution]:
    """``root``'s base requirements, transitively, without ``provided`` (``root`` excluded)."""
    seen: dict[str, md.Distribution] = {}
    todo = [_name(r) for r in _base_requirements(md.distribution(root))]
    while todo:
        name = todo.pop()
        if name in seen or name in provided:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:  # its marker does not hold here (e.g. python_version)
            continue
        seen[name] = dist
        todo += [_name(r) for r in _base_requirements(dist)]
    return sorted(seen.values(), key=lambda d: d.metadata["Name"].lower())


def _installed_files(dist: md.Distribution) -> list[tuple[Path, str]]:
    """(file, name in the archive) of a distribution's importable files (its RECORD's files
    under site-packages; no scripts, no bytecode)."""
    out = []
    for f in dist.files or []:
        rel = str(f)
        if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc"):
            continue
        path = Path(str(dist.locate_file(f)))
        if path.is_file():
            out.append((path, rel))
    return out


def _own_files() -> list[tuple[Path, str]]:
    """linkwatch's packages: from the wheel's RECORD, or (editable install) from the source tree
    the ``linkwatch`` package is imported from."""
    import linkwatch

    files = [(p, rel) for p, rel in _installed_files(md.distribution(DIST)) if "/" in rel]
    if any(rel.startswith("linkwatch/") for _, rel in files):
        return files
    root = Path(linkwatch.__file__).resolve().parents[1]
    out = []
    for pkg in sorted(d for d in root.iterdir() if (d / "__init__.py").is_file() and d.name != "tests"):
        for path in sorted(pkg.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                out.append((path, path.relative_to(root).as_posix()))
    return out


@dataclass(frozen=True)
class Packed:
    path: Path
    distributions: list[str]  # name==version of what was packed beside linkwatch
    files: int

    def submit_args(self) -> list[str]:
        return [
            "--archives",
            f"{self.path}#{ARCHIVE_DIR}",
            "--conf",
            f"spark.executorEnv.PYTHONPATH={ARCHIVE_DIR}",
        ]


def pack(out: Path) -> Packed:
    """Write the executors' archive to ``out`` (``.tar.gz``)."""
    dists = closure()
    members = _own_files()
    for dist in dists:
        members += _installed_files(dist)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tar:
        for path, name in members:
            tar.add(path, arcname=name, recursive=False)
    return Packed(out, [f"{d.metadata['Name']}=={d.version}" for d in dists], len(members))
