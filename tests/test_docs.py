"""The docs and the samples say what the code has: every setting of every config model appears
in its sample config, and every metric the code exports is in docs/metrics.md.

A sample shows a setting either as a key or as a commented-out key (``# instance: <hostname>``,
a ``# remediation:`` block): such a block is read as the YAML it becomes once uncommented, so
it must stay valid YAML that an operator can uncomment. Plugin settings (detectors,
remediations) are checked under their plugin's name against the plugin's own ``Config``.
"""

from __future__ import annotations

import ast
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from agent.config import AgentConfig
from alerts.config import ReceiverConfig
from analyzer.registry import load_detector_class
from analyzer.service import AnalyzerConfig
from consumer.async_fetch import ConsumerConfig
from lag.runner import LagConfig
from probe.config import ProbeConfig
from remediation.config import RemediatorConfig
from remediation.registry import load_class as load_remediation_class

ROOT = Path(__file__).resolve().parents[1]

# A commented line that is YAML once uncommented: a key or a list item (prose is left out).
_COMMENTED_YAML = re.compile(r"^(?P<indent>\s*)# ?(?P<rest>\s*(?:[A-Za-z_][\w.-]*\s*:(?:\s|$)|- ).*)$")


def documented(path: Path) -> Any:
    """The sample with every commented-out key uncommented (one level: a comment inside a
    commented block stays a comment). A comment further right than the line before it reaches
    (a value's explanation continued under it) is prose, not a key."""
    lines: list[str] = []
    reach = 0  # the indentation of the line before, plus one YAML level
    for line in path.read_text().splitlines():
        m = _COMMENTED_YAML.match(line)
        lines.append(m["indent"] + m["rest"] if m and len(m["indent"]) <= reach else line)
        if line.strip():
            reach = len(line) - len(line.lstrip()) + 2
    return yaml.safe_load("\n".join(lines))


def _models(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """``("one", M)`` for a field holding a model M (optionally None), ``("each", M)`` for a list
    of M; None for anything else (a scalar, a list or mapping of scalars)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return _models(args[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("one", annotation)
    listed = typing.get_origin(annotation) is list and args and isinstance(args[0], type)
    if listed and issubclass(args[0], BaseModel):
        return ("each", args[0])
    return None


# Sections whose keys are plugin names, each with the plugin's own Config model.
PLUGINS = {
    (AnalyzerConfig, "detectors"): lambda name: load_detector_class(name).Config,
    (RemediatorConfig, "remediations"): lambda name: load_remediation_class(name).Config,
}


def missing(model: type[BaseModel], shown: Any, where: str = "") -> list[str]:
    """Every setting of ``model`` (and of the models it holds) that ``shown`` does not show."""
    if not isinstance(shown, dict):
        return [f"{where}{name}" for name in model.model_fields]
    out = []
    for name, field in model.model_fields.items():
        if name not in shown:
            out.append(f"{where}{name}")
            continue
        if (model, name) in PLUGINS and isinstance(shown[name], dict):
            for plugin, settings in shown[name].items():
                config = PLUGINS[(model, name)](plugin)
                out += missing(config, settings or {}, f"{where}{name}.{plugin}.")
            continue
        kind = _models(field.annotation)
        if kind is None:
            continue
        how, inner = kind
        if how == "one":
            out += missing(inner, shown[name], f"{where}{name}.")
        else:
            items = [i for i in shown[name] or [] if isinstance(i, dict)]
            union = {k: v for item in items for k, v in item.items()}
            out += missing(inner, union, f"{where}{name}[].")
    return out


SAMPLES = [
    ("agent.sample.yaml", AgentConfig),
    ("analyzer.sample.yaml", AnalyzerConfig),
    ("lag.sample.yaml", LagConfig),
    ("probe.sample.yaml", ProbeConfig),
    ("remediation.sample.yaml", RemediatorConfig),
    ("alerts.example.yml", ReceiverConfig),
    ("consumer.yaml", ConsumerConfig),
]


@pytest.mark.parametrize(("sample", "model"), SAMPLES, ids=[s for s, _ in SAMPLES])
def test_every_setting_appears_in_its_sample(sample: str, model: type[BaseModel]) -> None:
    assert missing(model, documented(ROOT / "config" / sample)) == []


@pytest.mark.parametrize(("sample", "model"), SAMPLES, ids=[s for s, _ in SAMPLES])
def test_a_sample_uncommented_is_a_valid_config(sample: str, model: type[BaseModel]) -> None:
    """What an operator gets by uncommenting a block validates, plugin settings included."""
    shown = documented(ROOT / "config" / sample)
    model.model_validate(shown)
    for (owner, key), config_of in PLUGINS.items():
        if owner is model:
            for plugin, settings in shown[key].items():
                config_of(plugin).model_validate(settings or {})


def test_the_check_sees_a_missing_setting_and_a_commented_one(tmp_path: Path) -> None:
    class Inner(BaseModel):
        a: int = 1
        b: int = 2

    class Outer(BaseModel):
        name: str = "x"
        inner: Inner | None = None
        rows: list[Inner] = []

    sample = tmp_path / "s.yaml"
    sample.write_text(
        "# Validate with: the command\n"
        "name: x   # a prose comment: ignored\n"
        "          # b: a value's explanation continued, not a key\n"
        "# inner:\n"
        "#   a: 1   # shown, commented out\n"
        "#   # b: 2 (a comment inside the block stays one)\n"
        "rows:\n"
        "  - {a: 1}\n"
    )
    assert missing(Outer, documented(sample)) == ["inner.b", "rows[].b"]


# -- metrics ------------------------------------------------------------------------------------

# The packages that export metrics (the testbed and the CLI export none of their own).
PACKAGES = ["agent", "analyzer", "lag", "probe", "consumer", "alerts", "remediation", "spark_metrics"]
PACKAGES += ["producer", "linkwatch", "findings", "dashboards"]
_NAME = re.compile(r"^linkwatch_[a-z0-9_]+$")


def exported_metric_names() -> set[str]:
    """Every metric name in the code: a string constant ``linkwatch_…`` that is not a mapping's
    key (a label such as ``linkwatch_action`` is one). Names are constants wherever they are
    declared (a prometheus_client metric, a collector's metric family, a detector's gauge)."""
    names = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            keys = {id(k) for node in ast.walk(tree) if isinstance(node, ast.Dict) for k in node.keys}
            names |= {
                node.value
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _NAME.match(node.value)
                and id(node) not in keys
            }
    return names


def test_every_metric_the_code_exports_is_in_the_metrics_doc() -> None:
    doc = (ROOT / "docs" / "metrics.md").read_text()
    names = exported_metric_names()
    assert len(names) > 50, "the scan found too few names to be reading the exporters"
    # A counter is exposed with _total (prometheus_client adds it); a histogram's series with
    # _bucket, _count, _sum.
    absent = sorted(
        n for n in names if not re.search(rf"(?<![\w]){n}(_total|_bucket|_count|_sum)?(?![\w])", doc)
    )
    assert absent == []


def test_the_metric_scan_finds_names_and_skips_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        'NAME = "linkwatch_x_seconds"\n'
        'g = Gauge("linkwatch_y_ratio", "doc")\n'
        'labels = {"linkwatch_action": "notify"}\n'
        'text = "linkwatch_z is mentioned in prose"\n'
    )
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    monkeypatch.setattr(f"{__name__}.PACKAGES", ["pkg"])
    assert exported_metric_names() == {"linkwatch_x_seconds", "linkwatch_y_ratio"}
