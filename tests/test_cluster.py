"""A real Spark cluster: a standalone master and two workers started from the installed
PySpark on 127.0.0.1, no download. `pomo run` and a Dagster backfill of the water tanks
with ``--master spark://127.0.0.1:PORT`` store and write what local mode does.

The cluster's driver runs in a process of its own (this one keeps its local session).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from dagster_pomo.engine.policy import Policy
from dagster_pomo.engine.run import RunResult, run, write_outputs
from dagster_pomo.examples import water_tank_events
from dagster_pomo.lang import load_program
from tests.conftest import RULES
from tests.test_dagster_assets import _normal, stored

HOUR = 3_600_000
POMO = Path(sys.executable).with_name("pomo")
SPARK_HOME = Path(pyspark.__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _workers_alive(ui: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as page:
            state = json.load(page)
    except OSError:
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with two one-core workers, stopped after."""
    tmp = tmp_path_factory.mktemp("cluster")
    port, ui = _free_port(), _free_port()
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOG_DIR": str(tmp)}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    url = f"spark://127.0.0.1:{port}"
    master = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
    master += ["--port", str(port), "--webui-port", str(ui)]
    started = [
        subprocess.Popen(master, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    ]
    for i in range(2):
        worker = [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1"]
        worker += ["--cores", "1", "--memory", "1g", "--webui-port", str(_free_port())]
        worker += ["--work-dir", str(tmp / f"worker{i}")]
        started.append(
            subprocess.Popen(worker, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        )
    try:
        deadline = time.monotonic() + 90
        while _workers_alive(ui) < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p in started):
                pytest.skip("a standalone Spark master and two workers did not start here")
            time.sleep(0.5)
        yield url
    finally:
        for p in started:
            p.terminate()
        for p in started:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture(scope="module")
def tanks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three hours of water-tank readings (alerts by the third)."""
    landing = tmp_path_factory.mktemp("landing")
    water_tank_events(landing / "readings.jsonl", 9000, tanks=3, hours=3)
    return landing


@pytest.fixture(scope="module")
def local(tanks: Path) -> RunResult:
    """The water tanks' three hours evaluated by Spark in local mode, in this process (on
    Spark's plans, as the cluster evaluates them: worked out in this process, an average's
    terms would be summed in another order, its last bits other)."""
    spark_plans = Policy(in_process_inputs=0)
    return run(load_program(RULES / "water_tanks.pomo"), tanks, HOUR, policy=spark_plans)


def _on_cluster(url: str) -> dict[str, str]:
    """The environment of a process whose Spark runs on the cluster: its executors' Python
    workers use this interpreter, which has the project's packages (docs/operations.md)."""
    return {**os.environ, "POMO_SPARK_MASTER": url, "PYSPARK_PYTHON": sys.executable}


def test_pomo_run_on_a_cluster_writes_what_local_mode_writes(
    cluster: str, tanks: Path, local: RunResult, tmp_path: Path
) -> None:
    """The landing read by the cluster's executors (`--landing-reader spark`), the local run
    having read it in its process."""
    assert write_outputs(local, tmp_path / "local")["overflow_alert"] > 0
    corpus = str(RULES / "water_tanks.pomo")
    done = subprocess.run(
        [str(POMO), "run", corpus, "--events", str(tanks), "--master", cluster]
        + ["--out", str(tmp_path / "cluster"), "--landing-reader", "spark"],
        env=_on_cluster(cluster),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"spark: {cluster}" in done.stderr
    files = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "cluster").iterdir())
    for name in files:
        local_bytes = (tmp_path / "local" / name).read_bytes()
        assert (tmp_path / "cluster" / name).read_bytes() == local_bytes, name


def test_a_dagster_backfill_on_a_cluster_stores_what_pomo_run_derives(
    cluster: str, tanks: Path, local: RunResult, tmp_path: Path
) -> None:
    """One run over the three hourly partitions, every asset, its Spark on the cluster
    (the `SparkResource`'s master), in a process of its own."""
    warehouse = tmp_path / "warehouse"
    script = textwrap.dedent(
        f"""
        from dagster import DagsterInstance, materialize
        from dagster_pomo.examples import outbox_handlers
        from dagster_pomo.orchestration import SparkResource, pomo_definitions
        from tests.test_dagster_assets import KEYS, PARTITIONS

        corpus = {str(RULES / "water_tanks.pomo")!r}
        defs = pomo_definitions(
            corpus, PARTITIONS, {str(warehouse)!r}, {str(tanks)!r},
            handlers=outbox_handlers(corpus, {str(tmp_path / "outbox.sqlite")!r}),
            spark=SparkResource(master={cluster!r}),
        )
        result = materialize(
            list(defs.assets),
            instance=DagsterInstance.local_temp({str(tmp_path / "home")!r}),
            resources=dict(defs.resources),
            tags={{
                "dagster/asset_partition_range_start": KEYS[0],
                "dagster/asset_partition_range_end": KEYS[-1],
            }},
        )
        assert result.success
        """
    )
    (tmp_path / "home").mkdir()
    env = {**_on_cluster(cluster), "PYTHONPATH": str(Path(__file__).parents[1])}
    env.pop("POMO_SPARK_MASTER")  # the resource's own master wins
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = stored(local.program, warehouse)
    assert got["overflow_alert"], "the partitions hold alerts"
    for name, rows in got.items():
        assert rows == _normal(local.events(name)), name
