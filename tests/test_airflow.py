"""The water tanks as an Airflow 3 DAG, on a real Airflow (a metadata DB of its own in a
temporary ``AIRFLOW_HOME``, runs through ``dag.test``, Airflow 3's task runner) and real
Spark: a run of each interval stores what `pomo run` and a Dagster run store over the same
events, and a re-run repeats no action. (A real scheduler's catch-up, the landing watcher
and the UI: tests/test_airflow_ui.py.)

Airflow runs in child processes (its configuration is read when it is imported); the
stored epochs are read back here, on the test run's Spark session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance, HourlyPartitionsDefinition, materialize

from dagster_pomo.engine.actions import idempotency_key, subscriptions
from dagster_pomo.engine.driver import Driver
from dagster_pomo.engine.run import run
from dagster_pomo.engine.settings import JAVA_OPTIONS, QUICK_JIT
from dagster_pomo.engine.versions import merge_versions
from dagster_pomo.examples import DEFAULT_START, HOUR, outbox_handlers, water_tank_events
from dagster_pomo.lang import load_program
from dagster_pomo.orchestration import pomo_definitions
from dagster_pomo.plan.schema import infer_schemas
from dagster_pomo.timeline import epochs
from tests.airflow_scenario import HOURS
from tests.compare import rounded
from tests.conftest import RULES

ROOT = Path(__file__).resolve().parent.parent
CORPUS = RULES / "water_tanks.pomo"
PROGRAM = load_program(CORPUS)
# The example DAG's tasks: the inputs, the units of strata, the handlers.
TASKS = [
    "inputs",
    "level_per_minute",
    "level_10m",
    "high_minute",
    "near_capacity",
    "was_high",
    "overflow_alert",
    "action__notify_operator",
    "action__log_maintenance",
]
SCHEMAS = infer_schemas(PROGRAM, {})


def airflow_env(home: Path) -> dict[str, str]:
    """The environment of an Airflow of its own in ``home`` (SQLite, no example DAGs)."""
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": str(ROOT),
        # Every part waits for SQLite's lock instead of failing after five seconds.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "tests.airflow_db.CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": "tests.airflow_db.CONNECT_ARGS",
    }


def _run(args: list[str], env: dict[str, str], log: Path, timeout: float = 600) -> None:
    with log.open("w") as out:
        done = subprocess.run(
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
        )
    assert done.returncode == 0, log.read_text()[-4000:]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The scenario of `tests.airflow_scenario` run once: its folder and report."""
    work = tmp_path_factory.mktemp("airflow")
    (work / "landing").mkdir()
    water_tank_events(work / "landing" / "tanks.jsonl", 9_000, tanks=3, hours=HOURS)
    env = airflow_env(work / "home")
    _run([sys.executable, "-m", "airflow", "db", "migrate"], env, work / "migrate.log")
    _run([sys.executable, "-m", "tests.airflow_scenario", str(work)], env, work / "run.log")
    return work, json.loads((work / "report.json").read_text())


def stored(warehouse: Path, hours: int = HOURS) -> dict[str, list]:
    """Each derived relation's events as ``warehouse`` holds them through ``hours``."""
    history = epochs(DEFAULT_START, DEFAULT_START + hours * HOUR, HOUR)
    driver = Driver.open(
        PROGRAM, infer_schemas(PROGRAM, {}), str(warehouse), history, DEFAULT_START
    )
    return {
        r.name: sorted(
            (v.t, rounded(v.args), v.exp, rounded(v.aggs))
            for v in merge_versions(driver.versions(r.name), bool(r.aggregates))
        )
        for r in PROGRAM.catalog
        if r.derived
    }


def pomo_run(landing: Path, hours: int = HOURS) -> dict[str, list]:
    """What `pomo run` derives from every file of ``landing`` over the first ``hours``."""
    result = run(PROGRAM, landing, HOUR, DEFAULT_START, DEFAULT_START + hours * HOUR)
    return {
        name: sorted((v.t, rounded(v.args), v.exp, rounded(v.aggs)) for v in result.events(name))
        for name in (r.name for r in PROGRAM.catalog if r.derived)
    }


def listened_keys(warehouse: Path, hours: int = HOURS) -> set[str]:
    """The ledger key of every event a handler of the corpus listens to, as stored."""
    history = epochs(DEFAULT_START, DEFAULT_START + hours * HOUR, HOUR)
    driver = Driver.open(
        PROGRAM, infer_schemas(PROGRAM, {}), str(warehouse), history, DEFAULT_START
    )
    keys = set()
    for handler, subs in subscriptions(PROGRAM).items():
        for relation in {s.relation for s in subs}:
            rel = PROGRAM.catalog[relation]
            for v in merge_versions(driver.versions(relation), bool(rel.aggregates)):
                keys.add(idempotency_key(handler, relation, v.args, v.t))
    return keys


def test_each_interval_stores_what_pomo_run_and_a_dagster_run_store(
    scenario: tuple[Path, dict], tmp_path: Path
) -> None:
    work, report = scenario
    first = [s for s in report["states"] if s["stage"] == "three"]
    assert [s["interval"][0][:16] for s in first] == [
        "2023-11-14 22:00",
        "2023-11-14 23:00",
        "2023-11-15 00:00",
    ], "one run per epoch, in time order"
    for state in first:
        assert state["state"] == "success", state
        assert set(state["tasks"].values()) == {"success"}, state
    airflow = stored(work / "snap-three")
    assert any(airflow["overflow_alert"]), "the data raises alerts"

    # `pomo run` over the same file.
    only_first = tmp_path / "landing"
    only_first.mkdir()
    (only_first / "tanks.jsonl").write_bytes((work / "landing" / "tanks.jsonl").read_bytes())
    assert airflow == pomo_run(only_first)

    # A Dagster run of the same three partitions, into a warehouse of its own.
    partitions = HourlyPartitionsDefinition(start_date="2023-11-14-22:00")
    warehouse = tmp_path / "dagster-warehouse"
    handlers = outbox_handlers(CORPUS, tmp_path / "outbox.sqlite")
    defs = pomo_definitions(CORPUS, partitions, str(warehouse), str(only_first), handlers=handlers)
    keys = partitions.get_partition_keys()[:HOURS]
    (tmp_path / "home").mkdir()
    result = materialize(
        list(defs.assets),
        instance=DagsterInstance.local_temp(str(tmp_path / "home")),
        resources=dict(defs.resources),
        tags={
            "dagster/asset_partition_range_start": keys[0],
            "dagster/asset_partition_range_end": keys[-1],
        },
    )
    assert result.success
    assert stored(warehouse) == airflow

    # Every event a handler listens to was handed over once.
    calls = report["calls"]["three"]
    assert len(calls) == len(set(calls))
    assert set(calls) == listened_keys(work / "snap-three")


def test_each_asset_event_carries_the_rows_its_task_stored(scenario: tuple[Path, dict]) -> None:
    """An interval's asset events say what its task stored of the relation, per epoch, as
    Dagster's materializations do: the warehouse's rows of that relation in that epoch, and
    the events its version added and withdrew."""
    work, report = scenario
    events = [e for e in report["asset_events"] if e["asset"] == "water_tanks.level_10m"]
    assert len(events) == HOURS + 1, "one per run: three intervals, then one again"
    stored_rows = {}  # the warehouse as those runs left it
    for folder in (work / "snap-rerun" / "water_tanks" / "level_10m").glob("epoch=*"):
        rows = sum(pq.read_metadata(f).num_rows for f in folder.glob("*.parquet"))
        stored_rows[folder.name.removeprefix("epoch=")] = rows
    # Events (tank, t) per epoch: what a first version adds.
    distinct = {k: len(_events(work / "snap-rerun", "level_10m", k)) for k in stored_rows}
    for i, event in enumerate(events):
        extra = event["extra"]
        assert extra["corpus"] == "water_tanks" and extra["relation"] == "level_10m"
        (key,) = extra["epochs"]
        assert extra["rows_by_epoch"] == {key: stored_rows[key]} and extra["rows"] > 0
        # A first run of its interval adds every event; the run again changes nothing.
        added = distinct[key] if i < HOURS else 0
        assert extra["added_by_epoch"] == {key: added} and extra["withdrawn_by_epoch"] == {key: 0}
        assert (extra["added"], extra["withdrawn"]) == (added, 0)
    readings = [e for e in report["asset_events"] if e["asset"] == "water_tanks.water_level"]
    assert readings and all(e["extra"]["events"] > 0 for e in readings)


def _events(warehouse: Path, relation: str, key: str) -> set[tuple]:
    """The events (arguments, then t) epoch ``key`` of ``relation`` holds in ``warehouse``."""
    folder = warehouse / "water_tanks" / relation / f"epoch={key}"
    if not folder.exists():
        return set()
    columns = [*PROGRAM.catalog[relation].columns, "t"]
    return set(zip(*pq.read_table(folder, columns=columns).to_pydict().values(), strict=True))


def test_a_late_file_s_run_says_what_it_added_and_withdrew_and_tells_the_listeners(
    scenario: tuple[Path, dict],
) -> None:
    """A late file (maintenance of every tank from the third hour, a reading of it deleted)
    and the third hour run again: its asset events carry what the new versions added and
    withdrew, as the warehouse before and after tell apart; the alerts handed over before
    and now withdrawn are told to the listener, once each."""
    work, report = scenario
    third = str(DEFAULT_START + 2 * HOUR)
    extra = {e["asset"].removeprefix("water_tanks."): e["extra"] for e in report["late_events"]}
    before = _events(work / "snap-rerun", "overflow_alert", third)
    after = _events(work / "warehouse", "overflow_alert", third)
    assert before - after, "the case must withdraw alerts"
    alerts = extra["overflow_alert"]
    assert alerts["withdrawn_by_epoch"] == {third: len(before - after)}
    assert alerts["added_by_epoch"] == {third: len(after - before)}
    assert (extra["maintenance"]["added"], extra["maintenance"]["withdrawn"]) == (3, 0)
    assert (extra["water_level"]["added"], extra["water_level"]["withdrawn"]) == (0, 1)
    told = report["calls"]["late"][len(report["calls"]["rerun"]) :]
    withdrawals = [k for k in told if k.startswith("notify_operator:") and k.endswith(":withdrawn")]
    gone = {
        idempotency_key("notify_operator", "overflow_alert", e[:-1], e[-1]) for e in before - after
    }
    assert sorted(withdrawals) == sorted(f"{k}:withdrawn" for k in gone)


def test_running_an_interval_again_stores_the_same_and_repeats_no_action(
    scenario: tuple[Path, dict],
) -> None:
    work, report = scenario
    (again,) = [s for s in report["states"] if s["stage"] == "rerun"]
    assert again["state"] == "success" and again["interval"][0].startswith("2023-11-14 23:00")
    assert report["calls"]["rerun"] == report["calls"]["three"], "no handler call repeated"
    assert stored(work / "snap-rerun") == stored(work / "snap-three")


WITHOUT = """
import builtins, json, sys
real_import = builtins.__import__
def guarded(name, *args, **kwargs):
    if name == "{package}" or name.startswith("{package}."):
        raise ImportError(f"no {package} here: {{name}}")
    return real_import(name, *args, **kwargs)
builtins.__import__ = guarded
"""
STRUCTURE = (
    WITHOUT.format(package="dagster")
    + """
sys.path.insert(0, "pipelines/airflow")
import water_tanks
dag = water_tanks.dag
tasks = {
    t.task_id: {
        "upstream": sorted(t.upstream_task_ids),
        "inlets": sorted(a.name for a in t.inlets),
        "outlets": sorted(a.name for a in t.outlets),
        "depends_on_past": t.depends_on_past,
        "retries": t.retries,
    }
    for t in dag.tasks
}
corpus = dag.task_dict["inputs"].corpus
spark = {}
for conn in ("pomo_spark", "pomo_connect", None):
    corpus.spark_conn_id = conn
    for epochs in (1, 24):
        made = corpus.settings(epochs)
        spark[f"{conn}/{epochs}"] = [made.master, made.remote, dict(made.conf)]
print(json.dumps({
    "spark": spark,
    "tasks": tasks,
    "max_active_runs": dag.max_active_runs,
    "catchup": dag.catchup,
    "interval": str(dag.timetable._delta),
    "start": dag.start_date.isoformat(),
    "uri": next(iter(dag.task_dict["inputs"].outlets)).uri,
    "dagster": sorted(m for m in sys.modules if m == "dagster" or m.startswith("dagster.")),
}))
"""
)


def test_the_dagster_layer_loads_and_runs_without_airflow(tmp_path: Path) -> None:
    """The Dagster code location of the same corpus, where Airflow cannot be imported."""
    script = WITHOUT.format(package="airflow") + (
        "from dagster import materialize\n"
        "sys.path.insert(0, '.')\n"
        "from pipelines.water_tanks import defs\n"
        "print(len(list(defs.assets)), any(m.startswith('airflow') for m in sys.modules))\n"
    )
    env = {**airflow_env(tmp_path / "home"), "POMO_WAREHOUSE": str(tmp_path / "wh")}
    env["POMO_LANDING"] = str(tmp_path / "landing")
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split()[-2:] == ["9", "False"], done.stdout


def test_the_dag_has_the_units_as_tasks_and_the_relations_as_assets_without_dagster(
    tmp_path: Path,
) -> None:
    """The example DAG file, loaded where Dagster cannot be imported: a task for the
    inputs, one per unit of strata (the Dagster multi-assets), one per handler; each
    relation an asset, each task's outlets what it stores and inlets what it reads; one
    run at a time, each task after its own previous interval; Spark where an Airflow
    connection says."""
    env = {**airflow_env(tmp_path / "home"), "POMO_WAREHOUSE": str(tmp_path / "wh")}
    env["POMO_LANDING"] = str(tmp_path / "landing")
    env.pop("POMO_SPARK_MASTER", None)
    env.pop("POMO_SPARK_REMOTE", None)
    # Where Spark runs, from an Airflow connection (here in the environment).
    env["AIRFLOW_CONN_POMO_SPARK"] = json.dumps(
        {
            "conn_type": "spark",
            "host": "spark://10.0.0.5",
            "port": 7077,
            "extra": {"conf": {"spark.executor.memory": "2g"}},
        }
    )
    env["AIRFLOW_CONN_POMO_CONNECT"] = json.dumps(
        {"conn_type": "spark_connect", "host": "sc://spark-connect", "port": 15002}
    )
    done = subprocess.run(
        [sys.executable, "-c", STRUCTURE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["dagster"] == []
    tasks = found["tasks"]
    assert set(tasks) == set(TASKS)
    inputs = ["water_tanks.capacity", "water_tanks.maintenance", "water_tanks.water_level"]
    assert tasks["inputs"]["outlets"] == inputs
    assert tasks["near_capacity"]["upstream"] == ["inputs", "level_10m"]
    assert tasks["near_capacity"]["inlets"] == ["water_tanks.capacity", "water_tanks.level_10m"]
    assert tasks["near_capacity"]["outlets"] == ["water_tanks.near_capacity"]
    assert tasks["overflow_alert"]["upstream"] == ["high_minute", "inputs", "was_high"]
    assert tasks["action__notify_operator"]["upstream"] == ["overflow_alert"]
    assert tasks["action__log_maintenance"]["upstream"] == ["inputs"]
    assert all(t["depends_on_past"] for t in tasks.values())
    assert all(t["retries"] == 3 for t in tasks.values())
    assert (found["max_active_runs"], found["catchup"]) == (1, True)
    assert found["interval"] == "1:00:00"
    assert found["start"].startswith("2023-11-14T22:00:00")
    assert found["uri"].startswith(f"file://{tmp_path / 'wh'}/water_tanks/")
    # Spark: a master or a Spark Connect URL from a connection, its conf passed through;
    # a short run in a new local JVM with the JIT's quick tier only, as in Dagster.
    quick = {JAVA_OPTIONS: QUICK_JIT}
    memory = {"spark.executor.memory": "2g"}
    assert found["spark"] == {
        "pomo_spark/1": ["spark://10.0.0.5:7077", None, memory],
        "pomo_spark/24": ["spark://10.0.0.5:7077", None, memory],
        "pomo_connect/1": ["local[*]", "sc://spark-connect:15002", {}],
        "pomo_connect/24": ["local[*]", "sc://spark-connect:15002", {}],
        "None/1": ["local[*]", None, quick],
        "None/24": ["local[*]", None, {}],
    }
