"""Runs the water tanks' DAG on a real Airflow (``dag.test``: its metadata DB in
``$AIRFLOW_HOME``, the task runner of Airflow 3) through a scenario, for tests/test_airflow.py.

Run as ``python -m tests.airflow_scenario WORKDIR`` from the repository, with
``AIRFLOW_HOME`` set, the database migrated and ``AIRFLOW__CORE__DAGS_FOLDER`` empty (the
DAG file goes there: ``dag.test`` finds the DAG in it). In ``WORKDIR``: ``landing/`` (the
first file already there); it writes ``snap-<stage>/`` (a copy of the warehouse after each
stage), ``calls.txt`` (each handler call's key) and ``report.json``.

Stages: ``three``, the first three epochs in time order; ``rerun``, the second again;
``late``, a late file (maintenance of every tank from the third hour's start, and a
reading of it deleted) and the third hour again. The handlers hear withdrawals.
(The landing watcher re-running late epochs runs under a real scheduler, in
tests/test_airflow_ui.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from dagster_pomo.airflow import pomo_dag
from dagster_pomo.engine.actions import ActionEvent, Handler, Listener
from dagster_pomo.examples import DEFAULT_START, outbox_handlers, tank_names
from tests.conftest import RULES

HOURS = 3
TANKS = tank_names(3)


def _counting(calls: Path, handler: Callable[[ActionEvent], object]) -> Handler:
    """``handler``, every call of it recorded (its key) in ``calls``, one line per call (a
    `Listener`'s withdrawals too)."""
    if isinstance(handler, Listener):
        inserted = handler.inserted and _counting(calls, handler.inserted)
        return Listener(inserted, _counting(calls, handler.withdrawn))

    def call(event: ActionEvent) -> object:
        with calls.open("a", encoding="utf-8") as out:
            out.write(event.key + "\n")
        return handler(event)

    return call


def _calls(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split() if path.exists() else []


START = datetime.fromtimestamp(DEFAULT_START / 1000, UTC)
DAG_FILE = """from pathlib import Path
from tests.airflow_scenario import build
dag = build(Path({work!r}))
"""


def build(work: Path) -> DAG:
    """The water tanks' DAG over ``work``'s warehouse and landing folder, every handler
    recording its calls."""
    warehouse, landing = work / "warehouse", work / "landing"
    corpus = RULES / "water_tanks.pomo"
    outbox, calls = work / "outbox.sqlite", work / "calls.txt"
    found = outbox_handlers(corpus, outbox, withdrawals=True)
    handlers = {n: _counting(calls, h) for n, h in found.items()}
    return pomo_dag(
        corpus,
        warehouse=str(warehouse),
        landing=str(landing),
        start=START,
        epoch="1h",
        handlers=handlers,
        retries=0,
    )


def _asset_events() -> list[dict[str, object]]:
    """Every asset event the runs recorded in Airflow's metadata DB: asset name and extra."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        events = session.query(AssetEvent).order_by(AssetEvent.id).all()
        return [{"asset": e.asset.name, "extra": dict(e.extra or {})} for e in events]


def main(work: Path) -> None:
    folder = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "water_tanks.py").write_text(DAG_FILE.format(work=str(work)))
    dag = build(work)
    warehouse, calls, start = work / "warehouse", work / "calls.txt", START
    report: dict[str, object] = {"states": [], "calls": {}}

    def run(stage: str, **kwargs: object) -> None:
        result = dag.test(**kwargs)
        tis = result.get_task_instances()
        report["states"].append(  # type: ignore[union-attr]
            {
                "stage": stage,
                "state": str(result.state),
                "interval": [str(result.data_interval_start), str(result.data_interval_end)],
                "tasks": {ti.task_id: str(ti.state) for ti in tis},
            }
        )

    for hour in range(1, HOURS + 1):  # a run's logical date ends its interval
        run("three", logical_date=start + timedelta(hours=hour))
    shutil.copytree(warehouse, work / "snap-three")
    report["calls"]["three"] = _calls(calls)  # type: ignore[index]

    run("rerun", logical_date=start + timedelta(hours=2))
    shutil.copytree(warehouse, work / "snap-rerun")
    report["calls"]["rerun"] = _calls(calls)  # type: ignore[index]
    report["asset_events"] = _asset_events()

    third = DEFAULT_START + 2 * 3_600_000
    readings = (work / "landing" / "tanks.jsonl").read_text().splitlines()
    reading = next(json.loads(x) for x in readings if json.loads(x)["t"] >= third)
    late = [{"relation": "maintenance", "t": third, "args": [tank, "late"]} for tank in TANKS]
    late.append({**reading, "op": "delete"})
    (work / "landing" / "late.jsonl").write_text("".join(json.dumps(e) + "\n" for e in late))
    run("late", logical_date=start + timedelta(hours=3))
    report["calls"]["late"] = _calls(calls)  # type: ignore[index]
    report["late_events"] = _asset_events()[len(report["asset_events"]) :]  # type: ignore[arg-type]

    (work / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
