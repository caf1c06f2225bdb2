"""The Dagster UI shows a corpus's lineage and partitions, and what an edited rule makes
stale: the real `dagster dev` webserver, driven in headless Chromium.

Needs Chromium and the Playwright package; it skips, saying why, when either is missing.
The screenshots go to the test's temporary folder (``--basetemp`` keeps them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance

from dagster_pomo.engine.run import run
from dagster_pomo.examples import HOUR, water_tank_events
from dagster_pomo.lang import load_program
from dagster_pomo.orchestration.translator import code_version
from tests.conftest import ROOT, RULES
from tests.test_dagster_assets import KEYS, START, _normal, stored

DAGSTER = Path(sys.executable).with_name("dagster")
CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
LINEAGE = [
    "water_level",
    "maintenance",
    "capacity",
    "level_10m",
    "level_per_minute",
    "near_capacity",
    "high_minute",
    "was_high",
    "overflow_alert",
    "notify_operator",
    "log_maintenance",
]
HANDLERS = {"notify_operator", "log_maintenance"}
# The inputs' multi-asset (it is never split) and the ten-minute average's stratum.
BACKFILLED = {"water_level", "maintenance", "capacity", "level_10m"}
BROWSER_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH")
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Server:
    url: str
    home: Path
    warehouse: Path
    landing: Path
    rules: Path  # the corpora the code locations load: copies, for the test to edit


@pytest.fixture
def dagster_dev(tmp_path: Path) -> Iterator[Server]:
    """``dagster dev -w workspace.yaml`` over a temporary instance, warehouse and landing
    folder (three hours of water-tank readings); yields its URL and leaves no process behind
    (it runs in its own process group, which is killed outright)."""
    home, warehouse, landing = tmp_path / "home", tmp_path / "wh", tmp_path / "landing"
    (landing / "water_tanks").mkdir(parents=True)
    # The webserver's welcome dialog opens a second after a page loads, over whatever a test
    # clicks next, until the instance records it as seen: record it as a user who has seen it.
    (home / ".nux").mkdir(parents=True)
    (home / ".nux" / "nux.yaml").write_text("seen: 1\n")
    water_tank_events(landing / "water_tanks" / "r.jsonl", 1_500, hours=3, start=START)
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules)
    env = {
        "DAGSTER_HOME": str(home),
        "POMO_WAREHOUSE": str(warehouse),
        "POMO_LANDING": str(landing),
        "POMO_RULES": str(rules),
        # The freshness daemon evaluates every 5 s rather than every 30 s (its own setting).
        "FRESHNESS_DAEMON_INTERVAL_SECONDS": "5",
        **_daemon_tick(tmp_path),
    }
    with _serving(ROOT / "workspace.yaml", env, tmp_path) as url:
        yield Server(url, home, warehouse, landing, rules)


def _daemon_tick(tmp_path: Path) -> dict[str, str]:
    """The environment under which the backfill daemon of ``dagster dev`` ticks every 3 s
    rather than every 30 (see ``tests/daemon_tick/sitecustomize.py``)."""
    path = [str(ROOT / "tests" / "daemon_tick"), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        "PYTHONPATH": os.pathsep.join(path),
        "POMO_DAEMON_TICK": "3",
        "POMO_DAEMON_TICK_MARK": str(tmp_path / "daemon_tick"),
    }


@contextmanager
def _serving(workspace: Path, env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """``dagster dev -w WORKSPACE`` (from its folder, with ``env`` added); its URL, and no
    process left behind (it runs in its own process group, which is killed outright)."""
    port = _free_port()
    log = (tmp_path / "dagster_dev.log").open("w")
    server = subprocess.Popen(
        [str(DAGSTER), "dev", "-w", workspace.name, "-h", "127.0.0.1", "-p", str(port)],
        cwd=workspace.parent,
        env={**os.environ, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(f"{url}/server_info", server, tmp_path / "dagster_dev.log")
        yield url
    finally:
        os.killpg(server.pid, signal.SIGKILL)  # `dagster dev` may ignore SIGTERM for a while
        server.wait(timeout=30)
        log.close()
        _assert_nothing_left(server.pid)


def _wait_until_up(
    url: str, server: subprocess.Popen, log: Path, name: str = "dagster dev", seconds: int = 240
) -> None:
    """Wait until ``url`` answers 200 (``server``, which writes to ``log``, is ``name``)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"{name} exited with {server.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(1)
    pytest.fail(f"{name} did not answer within {seconds} s:\n{log.read_text()[-4000:]}")


def _assert_nothing_left(group: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    pytest.fail(f"processes of dagster dev's group {group} are still running")


def _graphql(url: str, query: str, variables: dict) -> dict:
    request = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": query, "variables": variables}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        answer = json.load(reply)
    assert "errors" not in answer, answer
    return answer["data"]


LAUNCH = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}
"""
STATUS = """
query Status($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    ... on PartitionBackfill { status runs(limit: 10) { runId status tags { key value } } }
  }
}
"""
FRESHNESS = """
query Freshness { assetNodes(group: {groupName: "water_tanks", repositoryName: "__repository__",
  repositoryLocationName: "water_tanks"}) { freshnessStatusInfo { freshnessStatus } } }
"""
BACKFILLS = """
query Backfills { partitionBackfillsOrError(limit: 5) {
  ... on PartitionBackfills { results { id partitionSetName } } } }
"""
ASSETS = """
query Assets { assetNodes(group: {groupName: "water_tanks", repositoryName: "__repository__",
  repositoryLocationName: "water_tanks"}) { assetKey { path } } }
"""

VERSIONS = """
query Versions($partition: String!) { assetNodes(group: {groupName: "water_tanks",
  repositoryName: "__repository__", repositoryLocationName: "water_tanks"}) {
  assetKey { path } opVersion staleStatus(partition: $partition) } }
"""


STALE = """
query Stale($partition: String!) { assetNodes(group: {groupName: "water_tanks",
  repositoryName: "__repository__", repositoryLocationName: "water_tanks"}) {
  assetKey { path } opVersion staleStatus(partition: $partition)
  staleCauses(partition: $partition) { category reason } } }
"""
RELOAD = """
mutation Reload($name: String!) { reloadRepositoryLocation(repositoryLocationName: $name) {
  __typename } }
"""
LOCATION = """
query Location($name: String!) { workspaceLocationEntryOrError(name: $name) {
  __typename ... on WorkspaceLocationEntry { loadStatus
    locationOrLoadError { __typename ... on PythonError { message } } } } }
"""


def _reload(url: str, location: str) -> None:
    """Reload a code location as the UI's "Reload" button does, and wait until it loaded."""
    reloaded = _graphql(url, RELOAD, {"name": location})["reloadRepositoryLocation"]
    assert reloaded["__typename"] == "WorkspaceLocationEntry", reloaded
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        entry = _graphql(url, LOCATION, {"name": location})["workspaceLocationEntryOrError"]
        if entry["loadStatus"] == "LOADED":
            assert entry["locationOrLoadError"]["__typename"] == "RepositoryLocation", entry
            return
        time.sleep(1)
    pytest.fail(f"code location {location} did not load again within 180 s")


def _shows_after_refresh(page, address: str, text: str, seconds: float = 180) -> None:
    """Open ``address`` until it shows ``text``, refreshing as a user would: the UI keeps
    asset definitions in the browser's cache and may draw the old ones first after a reload
    of the code location."""
    deadline = time.monotonic() + seconds
    while True:
        page.goto(address)
        try:
            page.get_by_text(text).first.wait_for(timeout=15_000)
            return
        except sync_api.TimeoutError:  # refresh and look again
            if time.monotonic() > deadline:
                raise


def _backfill(url: str, keys: list[str], relations: set[str], runs: int) -> tuple[str, dict]:
    """Launch a backfill of the water-tank assets of ``relations`` over ``keys`` as the UI's
    Materialize dialog does, and wait until its ``runs`` runs have finished (see `_ran`)."""
    nodes = _graphql(url, ASSETS, {})["assetNodes"]
    selection = [
        {"path": n["assetKey"]["path"]} for n in nodes if n["assetKey"]["path"][-1] in relations
    ]
    assert len(selection) == len(relations), (relations, nodes)
    params = {"assetSelection": selection, "partitionNames": keys}
    launched = _graphql(url, LAUNCH, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    return launched["backfillId"], _ran(url, launched["backfillId"], runs)


def _job_backfill(page, url: str, job: str, keys: list[str], shots: Path) -> tuple[str, dict]:
    """Launch a backfill of a corpus's job over ``keys`` from its Partitions page, as a
    user does (Materialize…, show all partitions, type the range, Launch backfill), and
    wait until its run has finished (see `_ran`)."""
    page.goto(f"{url}/locations/{job}/jobs/{job}/partitions")
    page.get_by_text("Materialize…").first.click()
    page.get_by_text("Show all partitions").click()
    box = page.get_by_placeholder(re.compile(r"^ex: "))
    box.fill(f"[{keys[0]}...{keys[-1]}]")
    box.press("Enter")
    page.get_by_text(f"{len(keys)} partitions").first.wait_for()
    page.screenshot(path=str(shots / "job_backfill.png"))
    page.get_by_role("button", name="Launch backfill").click()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = _graphql(url, BACKFILLS, {})["partitionBackfillsOrError"]["results"]
        mine = [b for b in found if b["partitionSetName"] == f"{job}_partition_set"]
        if mine:
            return mine[0]["id"], _ran(url, mine[0]["id"], 1)
        time.sleep(1)
    pytest.fail(f"no backfill of {job} was launched within 60 s")


def _ran(url: str, backfill: str, runs: int) -> dict:
    """The backfill's state once it has ``runs`` runs, all finished, or once it is finished
    itself. The daemon marks a backfill finished at its next tick after its last
    run: `_finished` waits for that (and for any further run it would launch, wrongly)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        state = _graphql(url, STATUS, {"id": backfill})["partitionBackfillOrError"]
        if state["status"] not in ("REQUESTED", "CANCELING", "FAILING"):
            return state
        done = [r for r in state["runs"] if r["status"] in ("SUCCESS", "FAILURE", "CANCELED")]
        if len(done) >= runs:
            return state
        time.sleep(2)
    pytest.fail(f"backfill {backfill} did not run {runs} runs in 600 s: {state}")


def _finished(url: str, backfill: str) -> dict:
    """The backfill's state once the daemon marked it finished."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        state = _graphql(url, STATUS, {"id": backfill})["partitionBackfillOrError"]
        if state["status"] not in ("REQUESTED", "CANCELING", "FAILING"):
            return state
        time.sleep(3)
    pytest.fail(f"backfill {backfill} did not finish in 600 s: {state}")


def _range_runs(state: dict, keys: list[str]) -> list[dict]:
    """The runs of a backfill, each checked to have succeeded over all of ``keys`` (one run
    for the range, never a run per partition)."""
    assert state["status"] in ("REQUESTED", "COMPLETED", "COMPLETED_SUCCESS"), state
    for one in state["runs"]:
        tags = {t["key"]: t["value"] for t in one["tags"]}
        assert one["status"] == "SUCCESS", one
        assert tags["dagster/asset_partition_range_start"] == keys[0], one
        assert tags["dagster/asset_partition_range_end"] == keys[-1], one
    return state["runs"]


def _freshness(url: str) -> set[str]:
    """The freshness statuses of the water tanks' assets once the daemon has evaluated them
    all (every 5 s here)."""
    deadline = time.monotonic() + 120
    while True:
        nodes = _graphql(url, FRESHNESS, {})["assetNodes"]
        statuses = {n["freshnessStatusInfo"]["freshnessStatus"] for n in nodes}
        if "UNKNOWN" not in statuses or time.monotonic() > deadline:
            return statuses
        time.sleep(3)


@contextmanager
def _browser() -> Iterator:
    """A page of headless Chromium, closed at the end of the block."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.set_default_timeout(120_000)
            yield page
        finally:
            browser.close()


def _partition_counts(page) -> tuple[int, int]:
    """A job's Partitions page's total and missing partition counts, once loaded (it
    shows 0 and 0 until the partition statuses arrive)."""
    deadline = time.monotonic() + 60
    while True:
        body = page.inner_text("body")
        total = re.search(r"([\d,]+)\s+Total partitions", body)
        missing = re.search(r"([\d,]+)\s+Missing partitions", body)
        assert total and missing, body
        counts = (int(total.group(1).replace(",", "")), int(missing.group(1).replace(",", "")))
        if counts[0] > 0 and counts[1] < counts[0] or time.monotonic() > deadline:
            return counts
        page.wait_for_timeout(500)


def test_the_ui_shows_lineage_runs_a_backfill_in_one_run_and_shows_its_partitions(
    dagster_dev: Server, tmp_path: Path
) -> None:
    url = dagster_dev.url
    with _browser() as page:
        # Lineage: inputs -> strata relations -> actions, in the corpus's group.
        page.goto(f"{url}/locations/water_tanks/asset-groups/water_tanks")
        for name in LINEAGE:
            page.get_by_text(name, exact=True).first.wait_for()
        body = page.inner_text("body")
        assert "cycle" not in body.lower(), body
        page.screenshot(path=str(tmp_path / "lineage.png"), full_page=True)

        # A backfill of three historical hours of the inputs and the ten-minute average,
        # launched as the UI's dialog launches it: the daemon runs each multi-asset once
        # over the whole range (a self-dependent asset gets a run of its own, after its
        # parents), never a run per partition, and it derives what the reference
        # evaluator derives from the same events. (The whole graph, actions included, is
        # a chain of five such runs, each waiting for the daemon's next tick;
        # tests/test_dagster_assets.py and tests/test_actions.py run it in process.)
        began = time.monotonic()
        backfill, state = _backfill(url, KEYS, BACKFILLED, 2)
        took = {"assets": time.monotonic() - began}
        # The daemon that launched it ticked every 3 s (Dagster still has the constant).
        assert (tmp_path / "daemon_tick").exists(), "Dagster's daemon interval has moved"
        assert len(_range_runs(state, KEYS)) == 2  # one per multi-asset
        # The webserver shows each relation's code version (a digest of its definition)
        # and what Dagster makes of it: the backfilled partitions are fresh.
        program = load_program(RULES / "water_tanks.pomo")
        versions = _graphql(url, VERSIONS, {"partition": KEYS[-1]})["assetNodes"]
        relations = [n for n in versions if n["assetKey"]["path"][1] != "action"]
        assert len(relations) == len(LINEAGE) - 2, versions  # all but the two handlers
        for node in relations:
            name = node["assetKey"]["path"][-1]
            assert node["opVersion"] == code_version(program.definition(name)), node
            want = "FRESH" if name in BACKFILLED else "MISSING"
            assert node["staleStatus"] == want, node
        page.goto(f"{url}/runs/b/{backfill}")
        page.get_by_text("level_10m").first.wait_for()
        page.screenshot(path=str(tmp_path / "backfill.png"), full_page=True)

        # The same range of the corpus's job, as its Partitions page launches it: the
        # whole graph, actions included, in one run.
        began = time.monotonic()
        job_backfill, state = _job_backfill(page, url, "water_tanks", KEYS, tmp_path)
        took["job"] = time.monotonic() - began
        assert len(_range_runs(state, KEYS)) == 1, state["runs"]
        (tmp_path / "backfill_seconds.json").write_text(json.dumps(took))
        print(f"backfill seconds: {took}")  # reported, not asserted
        nodes = _graphql(url, VERSIONS, {"partition": KEYS[-1]})["assetNodes"]
        assert {n["staleStatus"] for n in nodes} == {"FRESH"}, nodes
        # Each asset's freshness policy (due 15 minutes after its epoch's end), as the
        # daemon evaluates it: just materialized, every asset is within it.
        assert _freshness(url) == {"HEALTHY"}
        page.goto(f"{url}/locations/water_tanks/jobs/water_tanks/partitions")
        page.get_by_text("Missing partitions").first.wait_for()
        counted = _partition_counts(page)  # (total, missing), once the page has them
        assert counted[0] - counted[1] == len(KEYS), counted
        page.screenshot(path=str(tmp_path / "job_partitions.png"), full_page=True)

        # Partitions: the three materialized hours of a derived relation, and what one holds.
        page.goto(f"{url}/assets/water_tanks/level_10m?view=partitions")
        page.get_by_text("Materialized (3)").wait_for()
        page.get_by_text("Missing (").first.click()  # hide the missing ones
        # The first hour: a range run used to show the last hour's rows on every one.
        page.goto(f"{url}/assets/water_tanks/level_10m?view=partitions&partition={KEYS[0]}")
        page.get_by_text("pomo/rows_total").wait_for()
        body = page.inner_text("body")
        for shown in (*KEYS, "pomo/preview", "average(level)", "north"):
            assert shown in body, (shown, body)
        # The partition's preview holds its own hour's rows, not another partition's.
        hour = KEYS[0][:10] + "T" + KEYS[0][11:13] + ":"  # 2023-11-14T22:
        times = re.findall(r"\b2023-11-1\d{1}T\d\d:\d\d:\d\d(?:\.\d+)?Z", body)
        assert times and all(t.startswith(hour) for t in times), (hour, times)
        page.screenshot(path=str(tmp_path / "partitions.png"), full_page=True)

        # The asset's page: its row count, storage, tags, code references and the
        # comment above its rule in the corpus, as a dagster-dbt user finds them.
        page.goto(f"{url}/assets/water_tanks/level_10m")
        for shown in (  # each part of the page loads on its own: wait for each
            "Row count",
            "Sliding ten-minute average",
            "water_tanks.level_10m",
            "/water_tanks/level_10m",
            "pomo/kind: derived",
            "(water_tanks.pomo:",
        ):
            page.get_by_text(shown).first.wait_for()
        body = page.inner_text("body")
        count = re.search(r"Row count\s+([\d,]+)", body)
        assert count and int(count.group(1).replace(",", "")) > 0, body
        page.screenshot(path=str(tmp_path / "asset.png"), full_page=True)

        # A rule edited and its code location reloaded: the edited relation's code
        # version changes and the webserver marks its materialized partitions stale for
        # it ("has a new code version"; this UI draws the unsynced tag of unpartitioned
        # assets only), what the edit did not touch stays fresh, and the asset's page
        # shows the rule as edited.
        corpus = dagster_dev.rules / "water_tanks.pomo"
        rule = "level_10m(tank) @average(level) @max(level) := water_level(tank, level);"
        edited_rule = rule[:-1] + " if level >= 0.0;"
        assert rule in corpus.read_text()
        corpus.write_text(corpus.read_text().replace(rule, edited_rule))
        _reload(url, "water_tanks")
        edited = load_program(corpus)
        nodes = _graphql(url, STALE, {"partition": KEYS[-1]})["assetNodes"]
        after = {n["assetKey"]["path"][-1]: n for n in nodes}
        assert after["level_10m"]["opVersion"] == code_version(edited.definition("level_10m"))
        assert after["level_10m"]["opVersion"] != code_version(program.definition("level_10m"))
        assert after["level_10m"]["staleStatus"] == "STALE", after["level_10m"]
        causes = after["level_10m"]["staleCauses"]
        assert causes and {c["category"] for c in causes} == {"CODE"}, causes
        assert all("code version" in c["reason"] for c in causes), causes
        for name in BACKFILLED - {"level_10m"}:
            assert after[name]["staleStatus"] == "FRESH", after[name]
        _shows_after_refresh(page, f"{url}/assets/water_tanks/level_10m", edited_rule)
        page.screenshot(path=str(tmp_path / "edited.png"), full_page=True)

    # Each backfill, once the daemon has marked it finished, launched no run more.
    for launched, runs in ((backfill, 2), (job_backfill, 1)):
        state = _finished(url, launched)
        assert state["status"] in ("COMPLETED", "COMPLETED_SUCCESS"), state
        assert len(_range_runs(state, KEYS)) == runs, state["runs"]

    instance = DagsterInstance.from_config(str(dagster_dev.home))
    # Column lineage is drawn by Dagster+ only (the OSS UI has no view of it): it reads the
    # latest materialization's, which must be the definition's.
    near = AssetKey(["water_tanks", "near_capacity"])
    (latest,) = instance.fetch_materializations(near, limit=1).records
    drawn = latest.asset_materialization.metadata["dagster/column_lineage"].value  # type: ignore[union-attr]
    assert set(drawn.deps_by_column) == {"tank", "average", "max_level"}, drawn
    assert {d.asset_key for d in drawn.deps_by_column["tank"]} == {
        AssetKey(["water_tanks", "capacity"]),
        AssetKey(["water_tanks", "level_10m"]),
    }
    for name in LINEAGE:  # all of it, by the job's one run
        key = ["water_tanks", "action", name] if name in HANDLERS else ["water_tanks", name]
        assert instance.get_materialized_partitions(AssetKey(key)) == set(KEYS), name
    program = load_program(RULES / "water_tanks.pomo")
    landing = dagster_dev.landing / "water_tanks"
    expected = run(program, landing, HOUR, start=START, until=START + 3 * HOUR, engine="reference")
    got = stored(program, dagster_dev.warehouse, {"level_10m"})
    assert len(expected.events("level_10m")) > 1_000
    assert got["level_10m"] == _normal(expected.events("level_10m"))


RUN = """
mutation Run($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
  }
}
"""
RUN_STATUS = """
query RunStatus($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }
"""
CHECKS = """
query Checks($key: AssetKeyInput!) {
  assetCheckExecutions(assetKey: $key, checkName: "no_violation", limit: 10) {
    status
    partition
    evaluation { severity }
  }
}
"""
CHECK_LOCATION = """
import os

from dagster import HourlyPartitionsDefinition

from dagster_pomo.orchestration import pomo_definitions

defs = pomo_definitions(
    "tanks.pomo",
    HourlyPartitionsDefinition(start_date="2023-11-14-22:00"),
    os.environ["POMO_WAREHOUSE"],
    "landing",
)
"""


def _run_partition(url: str, job: str, partition: str) -> str:
    """Launch ``job`` over one partition, as the landing sensor and the schedule do; the
    run's final status."""
    params = {
        "selector": {
            "repositoryLocationName": "checks",
            "repositoryName": "__repository__",
            "jobName": job,
        },
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]},
    }
    launched = _graphql(url, RUN, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status = _graphql(url, RUN_STATUS, {"id": run_id})["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            return status
        time.sleep(1)
    pytest.fail(f"run {run_id} of {partition} did not finish")


def test_a_violated_check_fails_on_its_partition_in_the_ui(tmp_path: Path) -> None:
    """A `.check` of a corpus, run partition by partition as the sensor and the schedule run
    them: the partition holding a violation fails its run and its check (ERROR), the others
    pass, and the asset's Checks page shows the check failed."""
    (tmp_path / "tanks.pomo").write_text(
        ".decl water_level(tank: str, level: float);\n"
        "# A level below zero is a faulty sensor.\n"
        ".check negative_level(tank, level) := water_level(tank, level) if level < 0.0;\n"
    )
    (tmp_path / "location.py").write_text(CHECK_LOCATION)
    (tmp_path / "workspace.yaml").write_text(
        "load_from:\n  - python_file:\n      relative_path: location.py\n"
        "      location_name: checks\n      working_directory: .\n"
    )
    (tmp_path / "landing").mkdir()
    readings = [(0, 10.0), (1, -3.0), (1, 12.0), (2, 5.0)]
    (tmp_path / "landing" / "levels.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "relation": "water_level",
                    "t": START + h * HOUR + 60_000 * i,
                    "args": ["north", v],
                }
            )
            + "\n"
            for i, (h, v) in enumerate(readings)
        )  # fmt: skip
    )
    home = tmp_path / "home"
    (home / ".nux").mkdir(parents=True)
    (home / ".nux" / "nux.yaml").write_text("seen: 1\n")
    env = {"DAGSTER_HOME": str(home), "POMO_WAREHOUSE": str(tmp_path / "wh")}
    with _serving(tmp_path / "workspace.yaml", env, tmp_path) as url:
        statuses = [_run_partition(url, "tanks", key) for key in KEYS]
        assert statuses == ["SUCCESS", "FAILURE", "SUCCESS"], statuses
        key = {"path": ["tanks", "negative_level"]}
        executions = _graphql(url, CHECKS, {"key": key})["assetCheckExecutions"]
        verdicts = {e["partition"]: (e["status"], e["evaluation"]["severity"]) for e in executions}
        assert verdicts == {
            KEYS[0]: ("SUCCEEDED", "ERROR"),
            KEYS[1]: ("FAILED", "ERROR"),
            KEYS[2]: ("SUCCEEDED", "ERROR"),
        }, executions
        with _browser() as page:
            page.goto(f"{url}/assets/tanks/negative_level?view=checks")
            page.get_by_text("no_violation").first.wait_for()
            page.get_by_text("Failed").first.wait_for()
            page.screenshot(path=str(tmp_path / "checks.png"), full_page=True)
            # The check's own Partitions tab: one hour failed, two passed (the others
            # of the partitions' years are missing), and the failed one found by name.
            page.get_by_text("Partitions", exact=True).last.click()
            page.get_by_text("Failed (1)").first.wait_for()
            page.get_by_text("Passed (2)").first.wait_for()
            page.get_by_placeholder("Filter by partition").fill(KEYS[1])
            page.get_by_text("1 Partitions Selected").wait_for()
            page.get_by_text("Passed (0)").wait_for()  # the one left is the failed one
            page.get_by_text("Failed (1)").first.wait_for()
            page.screenshot(path=str(tmp_path / "check_partitions.png"), full_page=True)
