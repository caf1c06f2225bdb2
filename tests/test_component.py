"""A corpus added with a `defs.yaml` (a Dagster Component) in a real `dg` project layout."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, Definitions, materialize

from dagster_pomo.errors import UsageError
from dagster_pomo.examples import SqliteOutbox
from dagster_pomo.orchestration import epoch_partitions
from tests.conftest import RULES


def _project(root: Path, attributes: str) -> Path:
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [tool.dg]
            directory_type = "project"

            [tool.dg.project]
            root_module = "tanks_project"
            defs_module = "tanks_project.defs"
            """
        )
    )
    package = root / "tanks_project"
    folder = package / "defs" / "tanks"
    folder.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "handlers.py").write_text(
        "from dagster_pomo.examples import SqliteOutbox\n"
        f"outbox = SqliteOutbox({str(root / 'outbox.sqlite')!r})\n"
    )
    shutil.copy(RULES / "water_tanks.pomo", folder / "water_tanks.pomo")
    (folder / "defs.yaml").write_text(
        "type: dagster_pomo.orchestration.PomoComponent\nattributes:\n"
        + textwrap.indent(textwrap.dedent(attributes), "  ")
    )
    return root


def _load_with_a_maintenance_window(root: Path, folder: Path) -> Definitions:
    """The project's definitions, its landing folder holding one maintenance window."""
    from dagster import load_from_defs_folder

    (folder / "landing").mkdir()
    (folder / "landing" / "a.jsonl").write_text(
        '{"relation": "maintenance", "t": "2023-11-14T22:10:00Z", "args": ["north", "valve"]}\n'
    )
    for name in [m for m in sys.modules if m.startswith("tanks_project")]:
        del sys.modules[name]  # another test's project had a package of this name
    sys.path.insert(0, str(root))
    try:
        return load_from_defs_folder(path_within_project=root)
    finally:
        sys.path.remove(str(root))


def _first_hour(defs: Definitions, home: Path):  # noqa: ANN202 - Dagster's result
    """The first hour materialized on a Dagster instance in ``home``; it succeeded."""
    home.mkdir()
    result = materialize(
        list(defs.assets),
        instance=DagsterInstance.local_temp(str(home)),
        resources=dict(defs.resources),
        partition_key="2023-11-14-22:00",
    )
    assert result.success
    return result


def test_a_defs_yaml_builds_the_corpus_assets_and_they_run(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        """
        corpus: water_tanks.pomo
        epoch: 1h
        start: "2023-11-14T22:00"
        warehouse: warehouse
        landing: landing
        skew: 5m
        sensor_interval: 10s
        sensor_running: true
        handlers:
          notify_operator: tanks_project.handlers:outbox
          log_maintenance: tanks_project.handlers:outbox
        spark:
          conf: {spark.sql.shuffle.partitions: "2"}
          spark_landing_bytes: 0
        """,
    )
    folder = root / "tanks_project" / "defs" / "tanks"
    defs = _load_with_a_maintenance_window(root, folder)
    keys = {k for a in defs.assets for k in a.keys}
    assert AssetKey(["water_tanks", "overflow_alert"]) in keys
    assert AssetKey(["water_tanks", "action", "notify_operator"]) in keys
    assert [s.name for s in defs.schedules] == ["water_tanks__epochs"]
    (sensor,) = defs.sensors
    assert (sensor.minimum_interval_seconds, sensor.default_status.value) == (10, "RUNNING")
    # `spark:` takes every field of the Spark resource: here, Spark's tasks read any landing.
    spark = defs.resources["spark"]
    assert (spark.spark_landing_bytes, spark.conf) == (0, {"spark.sql.shuffle.partitions": "2"})
    _first_hour(defs, tmp_path / "home")
    assert (folder / "warehouse" / "water_tanks" / "maintenance").is_dir()
    effects = SqliteOutbox(root / "outbox.sqlite").effects()
    assert [(h, r, t) for h, r, _, t in effects] == [
        ("log_maintenance", "maintenance", 1_700_000_000_000 // 3_600_000 * 3_600_000 + 600_000)
    ]


def test_epoch_sizes_map_to_partitions_or_a_clear_error() -> None:
    assert epoch_partitions("1d", "2024-01-01").get_first_partition_key() == "2024-01-01"
    hourly = epoch_partitions("1h", "2024-01-01T00:00")
    assert hourly.get_first_partition_key() == "2024-01-01-00:00"
    assert hourly.cron_schedule == "0 */1 * * *"
    assert epoch_partitions("15m", "2024-01-01T00:00").cron_schedule == "*/15 * * * *"
    with pytest.raises(UsageError, match="divides an hour"):
        epoch_partitions("7m", "2024-01-01T00:00")


def test_the_schedule_fires_skew_after_each_epoch_and_requests_it(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from dagster import build_schedule_context

    from dagster_pomo.examples import outbox_handlers
    from dagster_pomo.orchestration import pomo_definitions

    corpus = RULES / "water_tanks.pomo"
    defs = pomo_definitions(
        corpus,
        epoch_partitions("15m", "2024-01-01T00:00"),
        str(tmp_path / "warehouse"),
        str(tmp_path / "landing"),
        skew="5m",
        handlers=outbox_handlers(corpus, tmp_path / "outbox.sqlite"),
    )
    (schedule,) = defs.schedules
    assert schedule.cron_schedule == "5,20,35,50 * * * *"
    at = datetime(2024, 1, 1, 0, 20, tzinfo=UTC)
    (request,) = schedule.evaluate_tick(
        build_schedule_context(
            scheduled_execution_time=at, repository_def=defs.get_repository_def()
        )
    ).run_requests
    assert request.partition_key == "2024-01-01-00:00" and request.run_key == request.partition_key


def test_a_defs_yaml_registers_the_lattices_its_corpus_merges_with(tmp_path: Path) -> None:
    """A corpus merging with `@lattice("bits", v)` loads only once `lattices:` names the
    function; without it the error says which lattice is missing and how to give it."""
    from dagster import load_from_defs_folder

    corpus = '.decl perm(u: str, b: int);\nrights(u) @lattice("bits", b) := perm(u, b);\n'
    attributes = """
        corpus: perms.pomo
        start: "2023-11-14T22:00"
        warehouse: warehouse
        landing: landing
        """
    for given in ("", "lattices:\n  bits: dagster_pomo.examples:flags\n"):
        here = tmp_path / f"p{len(given)}"
        here.mkdir()
        root = _project(here, attributes.rstrip(" ") + textwrap.indent(given, " " * 8))
        folder = root / "tanks_project" / "defs" / "tanks"
        (folder / "water_tanks.pomo").unlink()
        (folder / "perms.pomo").write_text(corpus)
        for name in [m for m in sys.modules if m.startswith("tanks_project")]:
            del sys.modules[name]  # another test's project had a package of this name
        sys.path.insert(0, str(root))
        try:
            if not given:
                with pytest.raises(Exception) as failed:  # noqa: PT011 - Dagster wraps ours
                    load_from_defs_folder(path_within_project=root)
                causes, error = [], failed.value
                while error is not None:
                    causes.append(str(error))
                    error = error.__cause__ or error.__context__
                assert any("no lattice registered as `bits`" in c for c in causes), causes
                continue
            defs = load_from_defs_folder(path_within_project=root)
        finally:
            sys.path.remove(str(root))
        keys = {k for a in defs.assets for k in a.keys}
        assert AssetKey(["perms", "rights"]) in keys


def test_a_defs_yaml_keeps_its_ledger_in_postgres_named_by_the_environment(
    tmp_path: Path, postgres: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ledger: "{{ env.NAME }}"`: the URL (and its password) stays out of the file; the
    actions of a run are recorded in that database, and the UI shows where."""
    from dagster_pomo.engine.actions import open_ledger
    from tests.postgres import new_database

    url = new_database(postgres)
    monkeypatch.setenv("TANKS_LEDGER", url)
    root = _project(
        tmp_path,
        """
        corpus: water_tanks.pomo
        epoch: 1h
        start: "2023-11-14T22:00"
        warehouse: warehouse
        landing: landing
        ledger: "{{ env.TANKS_LEDGER }}"
        handlers:
          notify_operator: tanks_project.handlers:outbox
          log_maintenance: tanks_project.handlers:outbox
        """,
    )
    folder = root / "tanks_project" / "defs" / "tanks"
    defs = _load_with_a_maintenance_window(root, folder)
    result = _first_hour(defs, tmp_path / "home")
    with open_ledger(url, "water_tanks") as led:
        assert led.counts("log_maintenance") == {"done": 1}
    assert not (folder / "warehouse" / "water_tanks" / "_actions.sqlite").exists()
    (shown,) = [
        e.event_specific_data.materialization.metadata["pomo/ledger"].value  # type: ignore[union-attr]
        for e in result.get_asset_materialization_events()
        if e.asset_key == AssetKey(["water_tanks", "action", "log_maintenance"])
    ]
    assert shown == url
