"""`linkwatch analyze` / `linkwatch report` refuse bad input before starting anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from linkwatch.cli import main


@pytest.mark.parametrize(
    ("args", "config", "message"),
    [
        (["report", "--from", "yesterday", "--to", "1"], None, "--from: 'yesterday': use ISO 8601"),
        (["report", "--from", "2", "--to", "1"], None, "--to: '1' is not after --from '2'"),
        (
            ["report", "--from", "1", "--to", "2"],
            "detectors:\n  slow_brokr: {}\n",
            "no entry point 'slow_brokr' in group linkwatch.detectors",
        ),
        (
            ["report", "--from", "1", "--to", "2", "--format", "pdf"],
            None,
            "use archive|kafka and table|json|html",
        ),
        (["analyze"], "widnow_s: 2\n", "widnow_s: unknown key"),
        (["analyze"], "detectors:\n  slow_broker: {peer_ratio: 0.5}\n", "peer_ratio=0.5"),
        # spark_conf: Spark's keys only, string values (YAML's false is not Spark's "false").
        (
            ["analyze"],
            "spark_conf:\n  spark.ui.showConsoleProgress: false\n",
            "spark_conf.spark.ui.showConsoleProgress=False: Input should be a valid string",
        ),
        (["analyze"], "spark_conf:\n  ui.enabled: 'false'\n", "String should match pattern '^spark"),
        (["analyze"], "spark_conf: [spark.ui.enabled]\n", "spark_conf"),
        (["analyze"], "spark_log: /\n", "spark_log='/': Value error, is a directory"),
    ],
)
def test_bad_input_exits_2_naming_it(args, config, message, tmp_path: Path, capsys) -> None:
    if config is not None:
        path = tmp_path / "analyzer.yaml"
        path.write_text(config)
        args = [*args, "--config", str(path)]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_sample_config_loads() -> None:
    from analyzer.registry import load_detectors
    from analyzer.service import AnalyzerConfig
    from linkwatch.config import load_config

    cfg = load_config(Path(__file__).parents[2] / "config" / "analyzer.sample.yaml", AnalyzerConfig)
    assert sorted(d.name for d in load_detectors(cfg.detectors)) == [
        "disk_imbalance",
        "hot_keys",
        "skewed_partitions",
        "slow_broker",
    ]
