"""`linkwatch analyze` / `linkwatch report` refuse bad input before starting anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main


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
        # The master URL is checked at load, naming the key (default local[2]; "" = spark-submit's).
        (["analyze"], "spark_master: spark//127.0.0.1:7077\n", "spark_master='spark//127.0.0.1:7077': Value"),
        (["analyze"], "spark_master: spark://127.0.0.1\n", "not a Spark master URL"),
        (["report", "--from", "1", "--to", "2"], "spark_master: local[0.5]\n", "spark_master='local[0.5]'"),
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


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("local[2]", True),
        ("local", True),
        ("local[*]", True),
        ("local[2,3]", True),
        ("spark://127.0.0.1:7077", True),
        ("spark://m1:7077,m2:7077", True),
        ("yarn", True),
        ("k8s://https://10.0.0.1:6443", True),
        ("k8s://kube.example:443", True),
        ("", True),  # spark-submit's --master decides
        ("local[]", False),
        ("spark://127.0.0.1", False),
        ("spark//127.0.0.1:7077", False),
        ("mesos://m:5050", False),  # removed in Spark 4
        ("Yarn", False),
        (" local[2]", False),
    ],
)
def test_master_url(url: str, ok: bool) -> None:
    from analyzer.service import AnalyzerConfig

    assert AnalyzerConfig().spark_master == "local[2]"
    if ok:
        assert AnalyzerConfig(spark_master=url).spark_master == url
    else:
        with pytest.raises(ValueError, match="not a Spark master URL"):
            AnalyzerConfig(spark_master=url)
