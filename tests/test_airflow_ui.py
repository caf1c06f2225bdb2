"""The example DAG on a real Airflow (``airflow standalone`` started by the command
docs/airflow.md gives, as written: API server and UI, scheduler, DAG processor, triggerer,
local executor, SQLite) with real Spark: the scheduler catches up
on two hourly intervals in time order, one run at a time, and stores what `pomo run`
derives; a late landing file wakes the landing watcher's deferred sensor, which re-runs
the epochs it changes, handing the new events over; a backfill of both hours runs them
again, each task after its own previous hour, storing the same and handing no event over
again; the UI shows the DAG's tasks and the relations as assets with their lineage, in
headless Chromium (screenshots in the test's temporary folder). The UI test skips,
saying why, without Chromium or Playwright (as tests/test_ui.py does); the scheduler's
does not need them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from dagster import HourlyPartitionsDefinition

from dagster_pomo.examples import (
    DEFAULT_START,
    HOUR,
    SqliteOutbox,
    outbox_handlers,
    water_tank_events,
)
from dagster_pomo.orchestration import pomo_definitions
from tests.test_airflow import (
    CORPUS,
    ROOT,
    TASKS,
    airflow_env,
    listened_keys,
    pomo_run,
    stored,
)
from tests.test_ui import CHROMIUM, _assert_nothing_left, _browser, _free_port, _wait_until_up

try:
    import playwright.sync_api
except ImportError:  # the UI test skips, saying so
    PLAYWRIGHT = False
else:
    PLAYWRIGHT = True

AIRFLOW = [sys.executable, "-m", "airflow"]
HOURS = 2
Standalone = tuple[str, dict[str, str], Path]  # URL, environment, folder
RELATIONS = [
    "water_level",
    "maintenance",
    "capacity",
    "level_10m",
    "level_per_minute",
    "near_capacity",
    "high_minute",
    "was_high",
    "overflow_alert",
]


def late_events() -> list[dict[str, object]]:
    """North at 120 (capacity 100) every second from 23:30 to 23:40 on the first day (the
    second epoch): its ten-minute average passes 90; and south's maintenance from 23:15."""
    second = DEFAULT_START + 3_600_000
    readings = [
        {"relation": "water_level", "t": t, "args": {"tank": "north", "level": 120.0}}
        for t in range(second + 1_800_000, second + 2_400_000, 1_000)
    ]
    south = {"relation": "maintenance", "t": second + 900_000, "args": ["south", "valve"]}
    return [*readings, south]


def documented_command() -> str:
    """The command docs/airflow.md gives to start Airflow on the example DAG, as written."""
    text = (ROOT / "docs" / "airflow.md").read_text(encoding="utf-8")
    block = next(b for b in text.split("```")[1::2] if "airflow standalone" in b)
    lines = block.strip().splitlines()
    return "\n".join(lines[next(i for i, line in enumerate(lines) if "AIRFLOW_HOME" in line) :])


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """Airflow started by the command docs/airflow.md gives, as written, in a folder laid out
    as a clone is (its `.venv` and `pipelines`), with no virtual environment on `PATH`;
    the environment adds only a free port, quicker polling, the DAG unpaused (the UI's
    toggle) and two hours of readings. Its URL and environment. No process is left behind
    (its process group is killed)."""
    tmp_path = tmp_path_factory.mktemp("standalone")
    venv = Path(sys.executable).parent
    (tmp_path / ".venv").symlink_to(venv.parent)
    (tmp_path / "pipelines").symlink_to(ROOT / "pipelines")
    landing = tmp_path / "landing"
    (landing / "water_tanks").mkdir(parents=True)
    water_tank_events(landing / "water_tanks" / "r.jsonl", 1_000, hours=HOURS)
    port = _free_port()
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != venv]
    env = {
        **airflow_env(tmp_path / ".airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "pipelines" / "airflow"),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        "POMO_WAREHOUSE": str(tmp_path / "wh"),
        "POMO_LANDING": str(landing),
        "POMO_AIRFLOW_HOURS": str(HOURS),
        "POMO_AIRFLOW_POLL_SECONDS": "2",
        "PATH": os.pathsep.join(path),
    }
    log_path = tmp_path / "standalone.log"
    log = log_path.open("w")
    server = subprocess.Popen(
        ["bash", "-c", documented_command()],
        cwd=tmp_path,
        env={**env, "PWD": str(tmp_path)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        health = f"{url}/api/v2/monitor/health"
        _wait_until_up(health, server, log_path, "airflow standalone", 300)
        yield url, env, tmp_path
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
        log.close()
        _assert_nothing_left(server.pid)


def _api(url: str, path: str) -> dict:
    """What the running API server answers to a GET of ``path`` (every user an admin: no
    sign-in). The test asks it rather than a fresh ``airflow`` command each poll, which
    took seconds of a core to import Airflow every time."""
    with urllib.request.urlopen(f"{url}/api/v2/{path}", timeout=30) as reply:
        return json.load(reply)


def _runs(url: str, dag: str) -> list[dict]:
    """The DAG's runs, each with its ``run_id``, ``logical_date``, ``state``, ``start_date``
    and ``end_date``."""
    found = _api(url, f"dags/{dag}/dagRuns?limit=100")["dag_runs"]
    return [{**r, "run_id": r["dag_run_id"]} for r in found]


def _finished(url: str, dag: str, count: int, log: Path) -> list[dict]:
    deadline = time.monotonic() + 600
    runs: list[dict] = []
    while time.monotonic() < deadline:
        runs = _runs(url, dag)
        if len(runs) >= count and all(r["state"] in ("success", "failed") for r in runs):
            return runs
        time.sleep(2)
    pytest.fail(f"{dag}: {count} runs did not finish in 600 s: {runs}\n{log.read_text()[-3000:]}")


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def _task_times(url: str, run_id: str) -> dict[str, tuple[datetime, datetime]]:
    """When each task of a run of the corpus's DAG started and ended."""
    path = f"dags/water_tanks/dagRuns/{urllib.parse.quote(run_id)}/taskInstances?limit=100"
    found = _api(url, path)["task_instances"]
    return {t["task_id"]: (_at(t["start_date"]), _at(t["end_date"])) for t in found}


def _rerun(url: str, began: datetime, log: Path) -> list[dict]:
    """The corpus's scheduled runs once each has run again since ``began``, in time order."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        runs = [r for r in _runs(url, "water_tanks") if r["run_id"].startswith("scheduled__")]
        fresh = [
            r for r in runs if r["start_date"] and datetime.fromisoformat(r["start_date"]) > began
        ]
        if len(fresh) == HOURS and all(r["state"] in ("success", "failed") for r in fresh):
            assert all(r["state"] == "success" for r in fresh), fresh
            return sorted(fresh, key=lambda r: r["logical_date"])
        time.sleep(2)
    pytest.fail(f"the backfill did not finish in 300 s:\n{log.read_text()[-3000:]}")


def _create(backfill: list[str], url: str, env: dict[str, str]) -> None:
    """Run ``airflow backfill create``, again while SQLite refuses it. Its writes can meet
    the scheduler's in a lock SQLite gives up on at once, whatever the wait (a read turned
    write), after the backfill's row was committed without its runs; such a backfill
    blocks the next ("Another backfill is running") until the scheduler drops it, two
    minutes later. As a user would, the test cancels it (the API's cancel) and asks again."""
    deadline = time.monotonic() + 180
    while True:
        done = subprocess.run(backfill, env=env, capture_output=True, text=True, timeout=120)
        said = done.stdout[-2000:] + done.stderr[-2000:]
        if done.returncode == 0:
            return
        locked = "database is locked" in said or "Another backfill is running" in said
        assert locked and time.monotonic() < deadline, said
        for left in _api(url, "backfills?dag_id=water_tanks")["backfills"]:
            if left["completed_at"] is None:
                _cancel(url, left["id"])
        time.sleep(1)


def _cancel(url: str, backfill: int) -> None:
    """Cancel a backfill through the API, again while SQLite is locked (503)."""
    deadline = time.monotonic() + 60
    request = urllib.request.Request(f"{url}/api/v2/backfills/{backfill}/cancel", method="PUT")
    while True:
        try:
            with urllib.request.urlopen(request, timeout=30):
                return
        except urllib.error.HTTPError as error:
            if error.code == 409:  # completed meanwhile
                return
            assert error.code == 503 and time.monotonic() < deadline, error.read()
        time.sleep(1)


def test_airflow_catches_up_in_time_order_and_reruns_the_epochs_a_late_file_changes(
    standalone: Standalone,
) -> None:
    url, env, tmp_path = standalone
    log, landing = tmp_path / "standalone.log", tmp_path / "landing" / "water_tanks"
    runs = _finished(url, "water_tanks", HOURS, log)
    runs.sort(key=lambda r: r["logical_date"])
    assert [r["state"] for r in runs] == ["success"] * HOURS, runs
    assert [r["logical_date"][:16] for r in runs] == ["2023-11-14T22:00", "2023-11-14T23:00"]
    # One run at a time, in time order: each started after the one before ended.
    for before, after in zip(runs, runs[1:], strict=False):
        ended = datetime.fromisoformat(before["end_date"])
        assert datetime.fromisoformat(after["start_date"]) >= ended, (before, after)
    assert stored(tmp_path / "wh", HOURS) == pomo_run(landing, HOURS)

    # A late file (events of the second hour): the watcher, deferred in the triggerer,
    # wakes and runs the corpus's DAG again over that hour, as its configuration says.
    (landing / "late.jsonl").write_text("".join(json.dumps(e) + "\n" for e in late_events()))
    runs = _finished(url, "water_tanks", HOURS + 1, log)
    (rerun,) = [r for r in runs if r["run_id"].startswith("manual__")]
    assert rerun["state"] == "success", rerun
    assert stored(tmp_path / "wh", HOURS) == pomo_run(landing, HOURS)
    watcher = _runs(url, "water_tanks__landing")
    assert any(r["state"] == "success" for r in watcher), watcher
    # Every event a handler listens to was handed over, the late file's new ones too:
    # north's alert in the second hour among them.
    outbox = SqliteOutbox(tmp_path / "wh" / "water_tanks" / "outbox.sqlite")
    assert listened_keys(tmp_path / "wh", HOURS) <= outbox.keys()
    second = range(DEFAULT_START + HOUR, DEFAULT_START + 2 * HOUR)
    alerts = [
        (json.loads(a)["tank"], t) for h, _, a, t in outbox.effects() if h == "notify_operator"
    ]
    assert any(tank == "north" and t in second for tank, t in alerts), alerts

    # A backfill of both hours over the runs that exist (`airflow backfill create`): the
    # scheduler runs them again, up to the backfill's own number of runs at once, but
    # every task after its own previous hour (the epochs pipelined in time order); they
    # store the same, and the handlers' steps find every event done.
    stored_before = stored(tmp_path / "wh", HOURS)
    began = datetime.now(UTC)
    backfill = [*AIRFLOW, "backfill", "create", "--dag-id", "water_tanks"]
    backfill += ["--from-date", "2023-11-14T22:00:00+00:00"]
    backfill += ["--to-date", "2023-11-14T23:00:00+00:00", "--reprocess-behavior", "completed"]
    _create(backfill, url, env)
    again = _rerun(url, began, log)
    tasks = [_task_times(url, run["run_id"]) for run in again]
    for before, after in zip(tasks, tasks[1:], strict=False):
        for task in TASKS:
            assert after[task][0] >= before[task][1], (task, before, after)
    assert stored(tmp_path / "wh", HOURS) == stored_before
    home = Path(env["AIRFLOW_HOME"]) / "logs" / "dag_id=water_tanks"
    for run in again:
        logs = sorted((home / f"run_id={run['run_id']}").glob("task_id=action__*/attempt=*.log"))
        latest = {p.parent.name: p for p in logs}  # attempts sort in order: the last wins
        assert len(latest) == 2, logs
        for path in latest.values():  # each epoch's line: "N ran, M done before, F failed"
            assert not re.search(r"[1-9]\d* ran, ", path.read_text()), path.read_text()


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH")
@pytest.mark.skipif(not PLAYWRIGHT, reason="Playwright is not installed")
def test_the_airflow_ui_shows_the_tasks_and_the_relations_lineage(standalone: Standalone) -> None:
    url, env, tmp_path = standalone
    _finished(url, "water_tanks", HOURS, tmp_path / "standalone.log")
    with _browser() as page:
        # The first visit signs in (every user an admin here) and lands on the home page.
        page.goto(url)
        page.get_by_text("Dags").first.wait_for()
        # The DAG's page: every task (inputs, the units, the handlers) and its runs.
        page.goto(f"{url}/dags/water_tanks")
        for task in TASKS:
            page.get_by_text(task, exact=True).first.wait_for()
        page.screenshot(path=str(tmp_path / "airflow_dag.png"), full_page=True)
        # The assets: every relation, made by its task.
        page.goto(f"{url}/assets")
        page.get_by_text("water_tanks.level_10m").first.wait_for()
        body = page.inner_text("body")
        for relation in RELATIONS:
            assert f"water_tanks.{relation}" in body, body
        page.screenshot(path=str(tmp_path / "airflow_assets.png"), full_page=True)
        # One relation's lineage: the DAG that makes it, every relation of the DAG, and
        # the watcher that re-runs it; a producing and a consuming task.
        page.get_by_text("water_tanks.level_per_minute", exact=True).first.click()
        page.get_by_text("Producing Tasks").first.wait_for()
        page.get_by_text("rerun_late_epochs").first.wait_for()
        # The counts come after the page (0 until the asset's details arrive).
        tasks = re.compile(r"Producing Tasks\s+1 Task\s+Consuming Tasks\s+1 Task")
        deadline = time.monotonic() + 60
        while not tasks.search(body := page.inner_text("body")) and time.monotonic() < deadline:
            page.wait_for_timeout(500)
        page.screenshot(path=str(tmp_path / "airflow_lineage.png"), full_page=True)
        for shown in ("water_tanks__landing", *(f"water_tanks.{r}" for r in RELATIONS)):
            assert shown in body, (shown, body)
        assert tasks.search(body), body
        # Its data lineage (Task Dependencies): the relations it is made from and those
        # made from it, through the tasks between them, each edge one Dagster draws too.
        expected = dagster_lineage(tmp_path / "dagster")
        drawn = _data_lineage(page)
        page.screenshot(path=str(tmp_path / "airflow_data_lineage.png"), full_page=True)
        assert ("water_tanks.water_level", "level_per_minute") in drawn, drawn
        assert ("high_minute", "water_tanks.high_minute") in drawn, drawn
        assert drawn <= expected, drawn - expected
        # From the input relations, the whole corpus: relation to relation as Dagster's
        # asset graph draws it (a unit per relation here), the handlers as tasks.
        inputs = sorted(target for source, target in expected if source == "inputs")
        for relation in inputs:
            page.goto(f"{url}/assets")
            page.get_by_text(relation, exact=True).first.click()
            drawn |= _data_lineage(page)
        assert drawn == expected, (expected - drawn, drawn - expected)


def _data_lineage(page: playwright.sync_api.Page) -> set[tuple[str, str]]:
    """The edges of the asset page's data lineage graph (its "Task Dependencies" view),
    each as the labels of its ends, once every node is drawn (fit into the view: the graph
    draws only the nodes in sight) and the count has held for a second."""
    page.get_by_text("Task Dependencies").first.click()
    page.locator(".react-flow__edge").first.wait_for(state="attached")
    page.get_by_label("Fit View").click()
    nodes, edges = page.locator(".react-flow__node"), page.locator(".react-flow__edge")
    seen, deadline = (-1, -1), time.monotonic() + 60
    while (now := (nodes.count(), edges.count())) != seen and time.monotonic() < deadline:
        seen = now
        page.wait_for_timeout(1000)
    names = {n.get_attribute("data-id"): n.inner_text().split("\n")[0].strip() for n in nodes.all()}
    drawn = set()
    for edge in edges.all():
        label = edge.get_attribute("aria-label") or ""
        source, target = label.removeprefix("Edge from ").split(" to ")
        drawn.add((names[source], names[target]))
    return drawn


def dagster_lineage(tmp: Path) -> set[tuple[str, str]]:
    """The edges Airflow's data lineage should draw for the example corpus, from Dagster's
    asset graph of it: the inputs task to each input relation; each relation to the task
    of each relation (or handler) made from it, that task to its relation. A relation's
    dependence on its own previous hour is Dagster's alone."""
    handlers = outbox_handlers(CORPUS, tmp / "outbox.sqlite", withdrawals=True)
    hourly = HourlyPartitionsDefinition(start_date="2023-11-14-22:00")
    wh, landing = str(tmp / "wh"), str(tmp / "landing")
    defs = pomo_definitions(CORPUS, hourly, wh, landing, handlers=handlers)
    graph = defs.resolve_asset_graph()
    edges: set[tuple[str, str]] = set()
    for key in graph.get_all_asset_keys():
        *_, kind, name = ("", *key.path)
        made_by = f"action__{name}" if kind == "action" else name
        parents = [p.path[-1] for p in graph.get(key).parent_keys if p != key]
        if kind != "action":
            edges.add((made_by if parents else "inputs", f"water_tanks.{name}"))
        edges |= {(f"water_tanks.{p}", made_by) for p in parents}
    return edges
