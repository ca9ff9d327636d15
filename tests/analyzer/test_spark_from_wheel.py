"""The Spark job from an installed wheel, on the standalone cluster, with executors whose Python
is a Spark cluster's (pyspark, pyarrow, numpy, pandas) and nothing of linkwatch's.

* The driver's environment: a fresh virtualenv with ``linkwatch[analyzer]`` installed from the
  wheel built from this tree; everything runs from a directory outside the tree, without
  ``PYTHONPATH``. The standalone cluster (master and two workers) is the testbed's.
* The executors' environment: a fresh virtualenv with pyspark, pyarrow, numpy and pandas only —
  ``import ddsketch`` and ``import orjson`` fail there.
* ``linkwatch spark package`` packs linkwatch and its dependencies for them; ``spark-submit``
  (the driver environment's) ships it with the options it prints and runs the installed
  ``cli/main.py report`` over a Parquet archive of fixed samples (broker 2 slow in ``local``)
  on the two workers. The report names broker 2, and the master lists the finished
  application: the executors imported ``ddsketch`` and ``orjson`` from the archive.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from testbed.spark import SparkClusterSpec, SparkStandalone, find_free_base_port, master_json
from tests.wheelkit import built_wheel, uv_install

pytestmark = [pytest.mark.minutes(4), pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]
UV = shutil.which("uv")
PYSPARK = "pyspark==4.0.1"

SAMPLES = """
import sys, time
from pathlib import Path
from linkwatch import records as R
from linkwatch.sketch import LatencySketch
from spark_metrics.batch import write_archive
from spark_metrics.session import spark_session

def sketch(p99):
    sk = LatencySketch()
    for i in range(58):
        sk.add(1.0 + (p99 / 4) * i / 60)
    sk.add(p99); sk.add(p99)
    return sk.to_dict()

end = (int(time.time()) // 10) * 10_000
t0 = end - 12 * 10_000
values = []
for i in range(12):
    for b in (1, 2, 3):
        slow = b == 2 and i >= 6
        for stage in R.STAGES:
            p99 = (600.0 if slow else 20.0 + b) if stage == "total" else (585.0 if slow and stage == "local" else 3.0)
            rec = R.StageSketch(cluster="wheel", source=f"broker-{b}", ts_ms=t0 + i * 10_000, broker=b,
                                request=R.PRODUCE, stage=stage, window_s=10, sketch=sketch(p99))
            values.append(rec.to_json().decode())
spark = spark_session("local[1]", app_name="samples")
write_archive(spark, values, Path(sys.argv[1]))
spark.stop()
print(t0, end)
"""


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{cmd[:3]}… exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )
    return done.stdout


@pytest.mark.skipif(UV is None, reason="uv is not installed (make bootstrap installs it)")
@pytest.mark.timeout(1200)
def test_the_report_runs_from_the_wheel_on_the_cluster_with_bare_executors(tmp_path: Path) -> None:
    assert UV is not None
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "SPARK_HOME")}
    work = tmp_path / "work"  # outside the source tree
    work.mkdir()
    wheel = built_wheel()
    driver, executors = tmp_path / "driver", tmp_path / "executors"
    for venv, requirement in (
        (driver, [f"linkwatch[analyzer] @ {wheel.as_uri()}"]),
        (executors, [PYSPARK, "pyarrow", "numpy", "pandas"]),
    ):
        _run([UV, "venv", "-q", "--python", sys.executable, str(venv)], work, env)
        uv_install(venv / "bin/python", requirement, env, work)
    bare = subprocess.run([str(executors / "bin/python"), "-c", "import ddsketch"], capture_output=True)
    assert bare.returncode != 0, "the executors' Python must not have ddsketch of its own"

    py, linkwatch = str(driver / "bin/python"), str(driver / "bin/linkwatch")
    main = _run([py, "-c", "import cli.main; print(cli.main.__file__)"], work, env).strip()
    assert Path(main).is_relative_to(driver) and not Path(main).is_relative_to(ROOT)
    archive = tmp_path / "state" / "archive"
    t0, end = map(int, _run([py, "-c", textwrap.dedent(SAMPLES), str(archive)], work, env).split()[-2:])
    out = _run([linkwatch, "spark", "package", str(tmp_path / "executor-env.tar.gz")], work, env)
    options = out.split("spark-submit options: ", 1)[1].split()
    assert options[0] == "--archives" and "ddsketch==" in out and "orjson==" in out

    # The cluster (the testbed's, from this checkout's pyspark 4.0.1) stands for the site's.
    base = find_free_base_port(2, start=31000 + (os.getpid() % 200) * 100)
    cluster = SparkStandalone(SparkClusterSpec(root=tmp_path / "spark", base_port=base))
    cluster.up()
    try:
        config = work / "analyzer.yaml"
        config.write_text(
            f"cluster: wheel\nwindow_s: 10\nstate_dir: {tmp_path / 'state'}\nspark_master: ''\n"
            f"spark_log: {tmp_path / 'spark.log'}\nprometheus: {{enabled: false}}\n"
        )
        spark_submit = str(
            Path(_run([py, "-c", "import pyspark; print(pyspark.__file__)"], work, env).strip()).parent
            / "bin/spark-submit"
        )
        report = work / "report.json"
        cmd = [
            spark_submit,
            "--master",
            f"spark://127.0.0.1:{base}",
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            f"spark.pyspark.python={executors / 'bin/python'}",
            "--conf",
            f"spark.pyspark.driver.python={py}",
            *options,
            main,
            "report",
            "--from",
            str(t0),
            "--to",
            str(end),
            "-c",
            str(config),
            "--format",
            "json",
            "--out",
            str(report),
        ]
        started = time.monotonic()
        _run(cmd, work, env, timeout=900)
        doc = json.loads(report.read_text())
        print(f"spark-submit report from the wheel: {time.monotonic() - started:.0f} s; {doc['verdict']}")
        assert ("slow_broker", "broker:2") in {(f["rule"], f["subject"]) for f in doc["findings"]}, doc
        assert doc["read"]["brokers"] == [1, 2, 3]
        apps = master_json(base + 1)["completedapps"]
        assert any(a["name"] == "linkwatch-report" for a in apps), apps
    finally:
        cluster.down()
