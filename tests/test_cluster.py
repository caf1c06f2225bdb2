"""A real Spark cluster: a standalone master and two workers started from the installed
PySpark on 127.0.0.1, no download. `pomo run` and a Dagster backfill of the water tanks
with ``--master spark://127.0.0.1:PORT`` store and write what local mode does, and a
recursion of 1,000 single-row rounds runs there in seconds.

The cluster's driver runs in a process of its own (this one keeps its local session).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.standalone import on_cluster, standalone
from dagster_pomo.engine.policy import Policy
from dagster_pomo.engine.run import RunResult, run, write_outputs
from dagster_pomo.engine.settings import QUICK_JIT
from dagster_pomo.examples import water_tank_events
from dagster_pomo.lang import load_program
from tests.conftest import RULES
from tests.test_dagster_assets import _normal, stored

HOUR = 3_600_000
# The JIT's quick tier for the cluster's JVMs when the tests' drivers have it (conftest.py);
# not the drivers' other options, a debugger's or profiler's port, which JVMs cannot share.
JAVA_OPTIONS = QUICK_JIT if QUICK_JIT in os.environ.get("SPARK_SUBMIT_OPTS", "") else ""


@pytest.fixture(scope="module")
def cluster_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the cluster's logs, its workers' folders and its configuration."""
    return tmp_path_factory.mktemp("cluster")


@pytest.fixture(scope="module")
def cluster(cluster_work: Path) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with two one-core workers, stopped after. One
    that does not start fails the tests, with the master's log: the suite needs Java for
    local Spark already, and the cluster needs nothing more. Its JVMs, the executors too,
    compile on the tier the tests' drivers do (`JAVA_OPTIONS`)."""
    with standalone(cluster_work, java_options=JAVA_OPTIONS) as url:
        if url is None:
            log = (cluster_work / "master.log").read_text(errors="replace")[-3000:]
            pytest.fail(f"a standalone Spark master and two workers did not start:\n{log}")
        yield url


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


COUNTER = """
.decl tick(x: int);
.decl c(x: int, n: int);
c(0, {rounds});
c(x + 1, n) := c(x, _) ^ c(_, n) if x < n;
"""
# `pomo run` as its command line runs it, then the counter epoch by epoch, in the same
# process and Spark application (an application's start costs ~20 s here).
RUN_THEN_COUNT = """
import json, sys
from pathlib import Path
from dagster_pomo.cli.main import main
from dagster_pomo.engine.driver import Driver
from dagster_pomo.engine.lines import ANY_TIME
from dagster_pomo.engine.policy import Policy
from dagster_pomo.engine.run import prepare
from dagster_pomo.lang import load_program

code = main(sys.argv[4:])
if code:
    raise SystemExit(code)
program = load_program(Path(sys.argv[1]))
prepared = prepare(program, sys.argv[2], 3_600_000, None, None, ANY_TIME)
driver = Driver.for_run(program, prepared, sys.argv[3])
ran = []
for epoch in prepared.epoch_range.epochs:
    stats = driver.evaluate_epoch(epoch)
    ran += [[s.relations, s.rounds, s.in_process] for s in stats.strata if "c" in s.relations]
args = sorted(v.args for v in driver.versions("c"))
print("counter:", json.dumps({"ran": ran, "c": args}))
# The counter again with its epoch on Spark's plans, as an epoch too large for the driver
plans = Driver.for_run(program, prepared, sys.argv[3] + "-plans", Policy(in_process_inputs=0))
stats = plans.evaluate_epoch(prepared.epoch_range.epochs[0])
ran = [[s.relations, s.rounds, s.in_process] for s in stats.strata if "c" in s.relations]
args = sorted(v.args for v in plans.versions("c"))
print("on spark:", json.dumps({"ran": ran, "c": args, "jobs": stats.spark_jobs}))
"""


def test_a_cluster_writes_what_local_mode_writes_and_runs_rounds_in_the_driver_or_a_task(
    cluster: str, cluster_work: Path, tanks: Path, local: RunResult, tmp_path: Path
) -> None:
    """The landing read by the cluster's executors (`--landing-reader spark`), the local run
    having read it in its process. Then, in the same process, the counter that joins its
    relation with itself on no shared variable, one row a round: its 1,000 rounds run in
    the driver, its versions brought by Spark (a Spark round would cost ~0.2 s); the
    second epoch reads the first's versions through Spark too, and derives nothing new.
    Its epoch on Spark's plans runs the rounds after the first in one of the cluster's
    tasks, its executors having this project (`executors.have_project`)."""
    assert write_outputs(local, tmp_path / "local")["overflow_alert"] > 0
    rounds = 1000
    counter = tmp_path / "counter.pomo"
    counter.write_text(COUNTER.format(rounds=rounds))
    ticks = tmp_path / "ticks.jsonl"
    lines = [{"relation": "tick", "t": t, "args": [t]} for t in (0, HOUR + 1)]
    ticks.write_text("".join(json.dumps(line) + "\n" for line in lines))
    corpus = str(RULES / "water_tanks.pomo")
    run_args = ["run", corpus, "--events", str(tanks), "--master", cluster]
    run_args += ["--out", str(tmp_path / "cluster"), "--landing-reader", "spark"]
    done = subprocess.run(
        [sys.executable, "-c", RUN_THEN_COUNT, str(counter), str(ticks), str(tmp_path / "wh")]
        + run_args,
        env={**on_cluster(cluster), "PYTHONPATH": str(Path(__file__).parents[1])},
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
    said = json.loads(done.stdout.split("counter: ")[1].splitlines()[0])
    assert said["c"] == [[x, rounds] for x in range(rounds + 1)]
    assert said["ran"] == [[["c"], rounds + 1, True], [["c"], 1, True]]
    # On Spark's plans, the rounds after the first run in one task on the cluster, whose
    # executors import this project (a Spark round there costs ~0.3 s: 1,000 would take
    # minutes, each a job at least)
    said = json.loads(done.stdout.split("on spark: ")[1].splitlines()[0])
    assert said["c"] == [[x, rounds] for x in range(rounds + 1)]
    assert said["ran"] == [[["c"], rounds + 1, False]]
    assert said["jobs"] < 30, said["jobs"]
    # The executors started with the cluster's Java options (each one's log begins with
    # its command line)
    started = [p.read_text() for p in cluster_work.glob("worker*/app-*/*/stderr")]
    commands = [log.split("\n=", 1)[0] for log in started]
    assert started and all(o in c for c in commands for o in JAVA_OPTIONS.split())


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
    env = {**on_cluster(cluster), "PYTHONPATH": str(Path(__file__).parents[1])}
    env.pop("POMO_SPARK_MASTER")  # the resource's own master wins
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = stored(local.program, warehouse)
    assert got["overflow_alert"], "the partitions hold alerts"
    for name, rows in got.items():
        assert rows == _normal(local.events(name)), name
