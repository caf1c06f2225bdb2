"""The corpus as Dagster assets, run on a real (temporary, on-disk) Dagster instance with
real Spark: a partition range in one run gives what `pomo run` gives."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DagsterInstance,
    HourlyPartitionsDefinition,
    materialize,
)

from dagster_pomo.engine.driver import Driver
from dagster_pomo.engine.run import run
from dagster_pomo.engine.versions import merge_versions
from dagster_pomo.errors import UsageError
from dagster_pomo.examples import DEFAULT_START, HOUR, outbox_handlers, water_tank_events
from dagster_pomo.lang import compile_corpus, load_program
from dagster_pomo.orchestration import epochs_through, pomo_definitions
from dagster_pomo.orchestration.resources import SparkResource
from dagster_pomo.plan.schema import infer_schemas
from tests.compare import rounded, window_versions
from tests.conftest import GOLDEN, RULES

START = DEFAULT_START  # 2023-11-14T22:00Z, where the generator starts
PARTITIONS = HourlyPartitionsDefinition(start_date="2023-11-14-22:00")
KEYS = ["2023-11-14-22:00", "2023-11-14-23:00", "2023-11-15-00:00"]


def _defs(corpus: Path, partitions, warehouse: Path, landing: Path, spark=None):
    """The corpus's definitions, every handler recording into an outbox beside the warehouse."""
    handlers = outbox_handlers(corpus, warehouse.parent / "outbox.sqlite")
    return pomo_definitions(
        corpus, partitions, str(warehouse), str(landing), handlers=handlers, spark=spark
    )


def _normal(rows):
    return sorted((r.t, rounded(r.args), r.exp, rounded(r.aggs)) for r in rows)


def stored(program, warehouse: Path, names: set[str] | None = None) -> dict[str, list]:
    """Each derived relation's events (or those of ``names``) as the warehouse holds them."""
    epochs = epochs_through(PARTITIONS, KEYS[-1])
    evaluator = Driver.open(program, infer_schemas(program, {}), str(warehouse), epochs, START)
    return {
        r.name: _normal(merge_versions(evaluator.versions(r.name), bool(r.aggregates)))
        for r in program.catalog
        if r.derived and (names is None or r.name in names)
    }


def test_a_partition_range_in_one_run_equals_pomo_run(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    water_tank_events(landing / "tanks.jsonl", 2_000, tanks=3, hours=3)
    warehouse = tmp_path / "warehouse"
    defs = _defs(RULES / "water_tanks.pomo", PARTITIONS, warehouse, landing)
    home = tmp_path / "dagster_home"
    home.mkdir()
    instance = DagsterInstance.local_temp(str(home))
    assets = list(defs.assets)
    resources = dict(defs.resources)

    result = materialize(
        assets,
        instance=instance,
        resources=resources,
        tags={
            "dagster/asset_partition_range_start": KEYS[0],
            "dagster/asset_partition_range_end": KEYS[-1],
        },
    )
    assert result.success
    assert len(instance.get_runs()) == 1, "the whole range runs in one run"
    events = result.asset_materializations_for_node("water_tanks__level_10m")
    assert [e.partition for e in events] == KEYS, "one materialization per partition"
    meta = events[0].metadata
    assert meta["pomo/rows_total"].value == meta["pomo/new_rows"].value > 0
    # A range this small (three epochs, 2,000 readings) is worked out epoch by epoch in the
    # run's process: Spark's jobs for one pass would cost more than its rows.
    assert (meta["pomo/run_partitions"].value, meta["pomo/run_passes"].value) == (3, 3)
    assert meta["pomo/run_passes_in_process"].value == len(KEYS)
    for event in events:
        # Each partition's preview holds its own rows: UTC ISO times within its hour.
        preview = event.metadata["pomo/preview"].value
        assert 0 < len(preview.records) <= 5
        columns = [c.name for c in preview.schema.columns][:3]
        assert columns == ["tank", "average(level)", "max(level)"]
        hour = datetime.strptime(event.partition, "%Y-%m-%d-%H:%M").replace(tzinfo=UTC)
        for record in preview.records:
            t = datetime.fromisoformat(record.data["t"])
            assert record.data["t"].endswith("Z") and timedelta(0) <= t - hour < timedelta(hours=1)
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert set(checks) == {"landing_lines_are_valid", "every_event_handed_over"}
    assert all(c.passed for c in checks.values()), checks  # no bad line, every call returned
    for name in ("level_10m", "overflow_alert", "water_level"):
        key = AssetKey(["water_tanks", name])
        assert instance.get_materialized_partitions(key) == set(KEYS), name

    # Each materialization records its asset's code version, a digest of its definition:
    # what Dagster compares to mark partitions stale once the rules change.
    versions = {key: v for a in assets for key, v in a.code_versions_by_key.items()}
    for key, version in versions.items():
        event = instance.get_latest_materialization_event(key)
        assert event is not None and event.tags["dagster/code_version"] == version, key
    text = (RULES / "water_tanks.pomo").read_text()
    old_rule = "level_10m(tank) @average(level) @max(level) := water_level(tank, level);"
    assert old_rule in text and "avg > 0.9 * max_level" in text
    edited = text.replace("avg > 0.9 * max_level", "avg > 0.8 * max_level").replace(
        old_rule,
        "# a comment\nlevel_10m(tank) @average(level)\n    @max(level) := water_level(tank,level);",
    )
    (tmp_path / "edited").mkdir()
    (tmp_path / "edited" / "water_tanks.pomo").write_text(edited)
    after = _defs(tmp_path / "edited" / "water_tanks.pomo", PARTITIONS, warehouse, landing)
    changed = {
        key
        for a in after.assets
        for key, v in a.code_versions_by_key.items()  # type: ignore[union-attr]
        if v != versions[key]
    }
    assert changed == {
        AssetKey(["water_tanks", "near_capacity"]),
        AssetKey(["water_tanks", "high_minute"]),
    }, "layout and comments do not count"
    # What the UI shows: Dagster's own stale status of the materialized partitions.
    from dagster._core.definitions.data_version import StaleCauseCategory, StaleStatus
    from dagster._utils.test.data_versions import get_stale_status_resolver

    resolver = get_stale_status_resolver(instance, list(after.assets))  # type: ignore[arg-type]
    near = AssetKey(["water_tanks", "near_capacity"])
    assert resolver.get_status(near, KEYS[1]) == StaleStatus.STALE
    assert [c.category for c in resolver.get_stale_causes(near, KEYS[1])] == [
        StaleCauseCategory.CODE
    ]
    for name in ("level_10m", "overflow_alert", "water_level"):
        assert resolver.get_status(AssetKey(["water_tanks", name]), KEYS[1]) == StaleStatus.FRESH
    # Evaluated again from unchanged inputs and rules, a partition keeps its data version.
    level = AssetKey(["water_tanks", "level_10m"])

    def data_version() -> str:
        records = instance.fetch_materializations(level, limit=100).records
        (latest, *_) = [r for r in records if r.partition_key == KEYS[1]]
        return latest.asset_materialization.tags["dagster/data_version"]  # type: ignore[union-attr]

    seen = []
    for _ in range(2):
        rerun = materialize(
            assets, instance=instance, resources=resources, partition_key=KEYS[1], selection=[level]
        )
        assert rerun.success
        seen.append(data_version())
    assert seen[0] == seen[1]

    program = load_program(RULES / "water_tanks.pomo")
    expected = run(program, landing, HOUR, start=START, until=START + 3 * HOUR, engine="reference")
    got = stored(program, warehouse)
    for name in expected.outputs:
        assert got[name] == _normal(expected.events(name)), name
    assert sum(len(v) for v in got.values()) > 2_000

    again = materialize(assets, instance=instance, resources=resources, partition_key=KEYS[1])
    assert again.success
    assert stored(program, warehouse) == got, "re-materializing a partition changes nothing"
    # Nothing stored since reaches it: the partition is kept as stored, and says so.
    for node in ("water_tanks__level_10m", "water_tanks__near_capacity"):
        meta = again.asset_materializations_for_node(node)[0].metadata
        assert meta["pomo/run_partitions_evaluated"].value == 0, node
        assert meta["pomo/evaluated"].value is False and meta["pomo/added"].value == 0, node
    # Evaluated all the same with `reach` off: one small partition, its strata worked out
    # in the run's process, no plan interpreted.
    every = {**resources, "spark": SparkResource(reach=False)}
    forced = materialize(assets, instance=instance, resources=every, partition_key=KEYS[1])
    assert forced.success and stored(program, warehouse) == got
    for node in ("water_tanks__level_10m", "water_tanks__overflow_alert"):
        meta = forced.asset_materializations_for_node(node)[0].metadata
        ran = (meta["pomo/run_passes_in_process"].value, meta["pomo/run_passes_interpreted"].value)
        assert ran == (1, 0), node
        assert meta["pomo/evaluated"].value is True, node

    # An input partition is versioned by its events: reading unchanged landing files again
    # is no new data, an added event is, and only then is what reads it stale.
    water = AssetKey(["water_tanks", "water_level"])
    inputs = [a for a in assets if water in a.keys]

    def read_inputs() -> str:
        done = materialize(inputs, instance=instance, resources=resources, partition_key=KEYS[1])
        assert done.success
        latest = instance.fetch_materializations(water, limit=1).records[0]
        return latest.asset_materialization.tags["dagster/data_version"]  # type: ignore[union-attr]

    first = read_inputs()
    assert read_inputs() == first
    resolver = get_stale_status_resolver(instance, assets)  # type: ignore[arg-type]
    assert resolver.get_status(level, KEYS[1]) == StaleStatus.FRESH
    hour = START + HOUR + 30 * 60_000
    added = {"relation": "water_level", "t": hour, "args": {"tank": "north", "level": 99.5}}
    with (landing / "tanks.jsonl").open("a") as lines:
        lines.write(json.dumps(added) + "\n")
    assert read_inputs() != first
    resolver = get_stale_status_resolver(instance, assets)  # type: ignore[arg-type]
    assert resolver.get_status(level, KEYS[1]) == StaleStatus.STALE
    causes = resolver.get_stale_causes(level, KEYS[1])
    assert StaleCauseCategory.DATA in {c.category for c in causes}
    assert resolver.get_status(level, KEYS[0]) == StaleStatus.FRESH


def test_a_run_starts_spark_once_its_steps_share_one_process(tmp_path: Path) -> None:
    """Spark is a JVM that takes seconds to start and to warm up: the runs the schedule,
    the sensor and the UI launch execute their steps (inputs, strata, actions) in one
    process, which keeps one Spark session, not a process and a JVM per multi-asset."""
    defs = _defs(RULES / "water_tanks.pomo", PARTITIONS, tmp_path / "wh", tmp_path / "landing")
    (schedule,) = defs.schedules
    scheduled = defs.resolve_job_def(schedule.job_name)
    assert len(scheduled.all_node_defs) > 3, "the scheduled run holds every step"
    assert scheduled.executor_def.name == "in_process"
    # The UI's asset backfills target assets, through the implicit asset job.
    assert defs.resolve_implicit_global_asset_job_def().executor_def.name == "in_process"


def test_one_job_runs_the_corpus_and_every_asset_is_due_after_its_epoch(tmp_path: Path) -> None:
    """The corpus's job holds every asset (its Partitions page backfills a range in one run)
    and is what the schedule and the sensor launch; every asset's freshness policy expects
    each epoch materialized between the epoch's end and its skew plus ``freshness`` after."""
    corpus = RULES / "water_tanks.pomo"
    handlers = outbox_handlers(corpus, tmp_path / "outbox.sqlite")
    folders = str(tmp_path / "wh"), str(tmp_path / "landing")
    defs = pomo_definitions(
        corpus, PARTITIONS, *folders, skew="5m", handlers=handlers, freshness="10m"
    )
    job = defs.resolve_job_def("water_tanks")
    every = {key for a in defs.assets for key in a.keys}  # type: ignore[union-attr]
    assert len(every) == 11
    assert set(job.asset_layer.executable_asset_keys) == every
    assert job.partitions_def == PARTITIONS
    assert {s.job_name for s in (*defs.schedules, *defs.sensors)} == {"water_tanks"}
    for asset in defs.assets:
        for spec in asset.specs:  # type: ignore[union-attr]
            policy = spec.freshness_policy
            assert policy.deadline_cron == "15 * * * *", spec.key  # 00:00 + 5m + 10m
            assert policy.lower_bound_delta == timedelta(minutes=15), spec.key
    quiet = pomo_definitions(corpus, PARTITIONS, *folders, handlers=handlers, freshness=None)
    assert all(s.freshness_policy is None for a in quiet.assets for s in a.specs)  # type: ignore[union-attr]


def test_pipelines_need_declared_inputs() -> None:
    """Each undeclared input is an error at its first use, which says the `.decl` to add."""
    from dagster_pomo.orchestration.corpus_assets import CorpusAssets
    from dagster_pomo.orchestration.translator import PomoTranslator

    program_text = ".decl q(x: int);\np(x) := q(x) ^ r(x, _s, _);\ns(y) := r(y, _, 1);\n"
    program = compile_corpus(program_text, "undeclared.pomo")
    with pytest.raises(UsageError) as raised:
        CorpusAssets(program, PARTITIONS, PomoTranslator())
    assert str(raised.value) == (
        "undeclared.pomo:2:16: `r` is an input of this pipeline but has no `.decl`: every "
        "epoch is stored with the same column types, so they must be declared\n"
        "    p(x) := q(x) ^ r(x, _s, _);\n"
        "                   ^\n"
        "  hint: add `.decl r(x: TYPE, c1: TYPE, c2: TYPE);` with each TYPE one of int, "
        "float, str, bool, time, cid"
    )


def test_what_pomo_check_warns_is_on_the_asset_it_concerns(tmp_path: Path) -> None:
    corpus = GOLDEN / "warnings" / "kinds.pomo"
    defs = pomo_definitions(corpus, PARTITIONS, str(tmp_path / "wh"), str(tmp_path / "landing"))
    metadata = {
        key.path[-1]: spec.metadata for a in defs.assets for key, spec in a.specs_by_key.items()
    }
    expected = (GOLDEN / "warnings" / "kinds.expected").read_text().split("\nkinds.pomo:")
    for name, golden in zip(["quoted", "opened", "named", "late"], expected, strict=True):
        shown = metadata[name]["pomo/warnings"].value
        assert golden.removeprefix("kinds.pomo:").strip() in shown, name
    assert "pomo/warnings" not in metadata["fine"]


def test_next_rules_carry_state_across_daily_partitions(tmp_path: Path) -> None:
    from dagster import DailyPartitionsDefinition

    day = 24 * HOUR
    start = START // day * day
    partitions = DailyPartitionsDefinition(start_date="2023-11-14")
    landing = tmp_path / "landing"
    landing.mkdir()
    logins = [("ann", 0), ("bob", 0), ("ann", 1), ("ann", 2), ("bob", 2)]
    (landing / "logins.jsonl").write_text(
        "".join(
            f'{{"relation": "login", "t": {start + d * day + 3_600_000}, "args": ["{u}"]}}\n'
            for u, d in logins
        )
    )
    warehouse = tmp_path / "warehouse"
    defs = _defs(RULES / "login_streaks.pomo", partitions, warehouse, landing)
    home = tmp_path / "dagster_home"
    home.mkdir()
    instance = DagsterInstance.local_temp(str(home))
    keys = ["2023-11-14", "2023-11-15", "2023-11-16"]
    _materialize_range(defs, instance, keys)
    program = load_program(RULES / "login_streaks.pomo")
    expected = _assert_stored_equals_reference(program, warehouse, landing, partitions, keys)
    streaks = {(r.args, r.t) for r in expected.events("streak")}
    assert (("ann", 2), start + 2 * day) in streaks  # ann logged in on days 0 and 1
    assert (("bob", 1), start + day) in streaks and (("bob", 2), start + 2 * day) not in streaks


def materialize_each(defs, instance: DagsterInstance, keys) -> None:  # noqa: ANN001
    """Every asset of ``defs``, each partition of ``keys`` in a run of its own, in order."""
    for key in keys:
        done = materialize(
            list(defs.assets), instance=instance, resources=dict(defs.resources), partition_key=key
        )
        assert done.success


def _materialize_range(defs, instance: DagsterInstance, keys: list[str]):
    result = materialize(
        list(defs.assets),
        instance=instance,
        resources=dict(defs.resources),
        tags={
            "dagster/asset_partition_range_start": keys[0],
            "dagster/asset_partition_range_end": keys[-1],
        },
    )
    assert result.success
    return result


def _assert_stored_equals_reference(program, warehouse: Path, landing: Path, partitions, keys):
    """Every derived relation in the warehouse equals `pomo run` (reference) over the range."""
    epochs = epochs_through(partitions, keys[-1])
    schemas = infer_schemas(program, {})
    evaluator = Driver.open(program, schemas, str(warehouse), epochs, epochs[0].start)
    size = epochs[0].end - epochs[0].start
    expected = run(
        program, landing, size, start=epochs[0].start, until=epochs[-1].end, engine="reference"
    )
    for rel in program.catalog:
        if rel.derived or rel.inductive:
            got = _normal(merge_versions(evaluator.versions(rel.name), bool(rel.aggregates)))
            assert got == _normal(expected.events(rel.name)), rel.name
    return expected


def test_next_rules_feeding_back_into_strata_run_epoch_by_epoch(tmp_path: Path) -> None:
    """`count` comes from the previous epoch's `shown`, which comes from this epoch's `count`:
    one multi-asset evaluates both, epoch after epoch, and a range equals `pomo run`."""
    from dagster import DailyPartitionsDefinition

    from tests.test_units import FEEDBACK

    day = 24 * HOUR
    start = START // day * day
    partitions = DailyPartitionsDefinition(start_date="2023-11-14")
    corpus = tmp_path / "feedback.pomo"
    corpus.write_text(FEEDBACK)
    landing = tmp_path / "landing"
    landing.mkdir()
    ticks = [("ann", d) for d in range(4)] + [("bob", 0), ("bob", 2), ("bob", 3)]
    (landing / "ticks.jsonl").write_text(
        "".join(
            f'{{"relation": "tick", "t": {start + d * day + 60_000}, "args": ["{u}"]}}\n'
            for u, d in ticks
        )
    )
    warehouse = tmp_path / "warehouse"
    defs = _defs(corpus, partitions, warehouse, landing)
    names = sorted(a.node_def.name for a in defs.assets)
    assert names == ["feedback__inputs", "feedback__report", "feedback__shown_and_count"]
    home = tmp_path / "dagster_home"
    home.mkdir()
    keys = ["2023-11-14", "2023-11-15", "2023-11-16", "2023-11-17"]
    _materialize_range(defs, DagsterInstance.local_temp(str(home)), keys)
    expected = _assert_stored_equals_reference(
        load_program(corpus), warehouse, landing, partitions, keys
    )
    reports = {(r.args, r.t) for r in expected.events("report")}
    assert (("ann", 3), start + 3 * day) in reports, "ann ticked on days 0, 1 and 2"


def test_multi_assets_without_recursion_run_small_epochs_interpreted(tmp_path: Path) -> None:
    """Group membership is recursive, what uses it is not: over a range in one Spark pass
    (asked for: a range this small goes epoch by epoch in the run's process by default),
    the multi-assets of the strata without recursion run their small epochs' plans
    interpreted, the recursive one keeps generated code, each says so in its metadata, and
    the range equals `pomo run`."""
    from dagster_pomo.plan.units import units

    corpus = RULES / "access_control.pomo"
    program = load_program(corpus)
    events = [
        ("member", 0, ["ann", "staff"]),
        ("subgroup", 0, ["staff", "admins"]),
        ("grant", 0, ["admins", "audit-log", "read"]),
        ("access", 1, ["ann", "audit-log", "read"]),
        ("access", 1, ["bob", "audit-log", "read"]),
        ("member", 2, ["bob", "staff"]),
        ("access", 2, ["bob", "audit-log", "read"]),
    ]
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "access.jsonl").write_text(
        "".join(
            json.dumps({"relation": r, "t": START + h * HOUR + 60_000, "args": a}) + "\n"
            for r, h, a in events
        )
    )
    warehouse = tmp_path / "warehouse"
    defs = _defs(corpus, PARTITIONS, warehouse, landing, SparkResource(in_process_epochs=0))
    home = tmp_path / "dagster_home"
    home.mkdir()
    result = _materialize_range(defs, DagsterInstance.local_temp(str(home)), KEYS)

    # (passes, of which interpreted) by whether the unit is recursive: each evaluates the
    # range as one pass, the others' still small enough to run interpreted.
    passes: dict[bool, set[tuple[int, int]]] = {True: set(), False: set()}
    for unit in units(program):
        for done in result.asset_materializations_for_node(f"{program.name}__{unit.name}"):
            recursive = any(s.recursive for s in unit.strata)
            ran = (
                done.metadata["pomo/run_passes"].value,
                done.metadata["pomo/run_passes_interpreted"].value,
            )
            passes[recursive].add(ran)
    assert passes == {True: {(1, 0)}, False: {(1, 1)}}
    expected = _assert_stored_equals_reference(program, warehouse, landing, PARTITIONS, KEYS)
    assert {r.args[0] for r in expected.events("violation")} == {"bob"}


def test_landing_sensor_requests_touched_epochs_and_replays_late_ones(tmp_path: Path) -> None:
    from dagster_pomo.orchestration import PomoStorage
    from tests.sensor_ticks import sensor_tick

    landing, warehouse, home = tmp_path / "landing", tmp_path / "warehouse", tmp_path / "home"
    for d in (landing, home):
        d.mkdir()
    defs = _defs(RULES / "water_tanks.pomo", PARTITIONS, warehouse, landing)
    (watch,) = defs.sensors
    assert (watch.minimum_interval_seconds, watch.default_status.value) == (30, "STOPPED")
    quick = pomo_definitions(
        RULES / "water_tanks.pomo",
        PARTITIONS,
        str(warehouse),
        str(landing),
        handlers=outbox_handlers(RULES / "water_tanks.pomo", tmp_path / "outbox.sqlite"),
        sensor_interval_seconds=5,
        sensor_running=True,
    )
    (watch,) = quick.sensors
    assert (watch.minimum_interval_seconds, watch.default_status.value) == (5, "RUNNING")
    instance = DagsterInstance.local_temp(str(home))
    storage = PomoStorage(warehouse=str(warehouse), landing=str(landing))

    def tick(cursor):
        return sensor_tick(defs, instance, storage, cursor)

    def reading(t: int) -> str:
        return f'{{"relation": "water_level", "t": {t}, "args": ["north", 50.0]}}\n'

    def ranges(result) -> list[tuple[str, str]]:
        return [
            (
                r.tags["dagster/asset_partition_range_start"],
                r.tags["dagster/asset_partition_range_end"],
            )
            for r in result.run_requests
        ]

    (landing / "a.jsonl").write_text(reading(START + 10) + reading(START + HOUR + 5) + "bad\n")
    first = tick(None)
    assert ranges(first) == [(KEYS[0], KEYS[1])], "one run, in time order"
    assert tick(first.cursor).run_requests == [], "seen files start nothing"

    inputs = [a for a in defs.assets if a.node_def.name.endswith("__inputs")]

    def store(first: str, last: str):
        result = materialize(
            inputs,
            instance=instance,
            resources=dict(defs.resources),
            tags={
                "dagster/asset_partition_range_start": first,
                "dagster/asset_partition_range_end": last,
            },
        )
        assert result.success
        (check,) = result.get_asset_check_evaluations()
        metadata = {
            m.asset_key.path[-1]: m.metadata
            for m in result.asset_materializations_for_node(inputs[0].node_def.name)
        }["water_level"]
        return check, metadata

    check, metadata = store(KEYS[0], KEYS[2])  # a bad line does not stop ingestion
    assert _files(metadata) == (1, 1)
    assert not check.passed and check.metadata["pomo/quarantined"].value == 1
    (kept,) = Path(check.metadata["pomo/quarantine_file"].value).read_text().splitlines()
    assert json.loads(kept)["text"] == "bad", "the bad line is kept with its reason"

    # The sensor turned on only now, after that backfill: what the backfill stored is not
    # run again; a file holding an epoch not yet run still requests that epoch alone.
    turned_on = tick(None)
    assert turned_on.run_requests == [], "what the backfill stored is not run again"
    (landing / "b.jsonl").write_text(reading(START + 10) + reading(START + 3 * HOUR + 5))
    store(KEYS[0], KEYS[0])  # the inputs step reads b.jsonl for the first epoch
    fourth = PARTITIONS.get_partition_key_for_timestamp((START + 3 * HOUR) / 1000)
    assert ranges(tick(None)) == [(fourth, fourth)], "only the epoch not run yet"
    (landing / "b.jsonl").unlink()

    (landing / "late.jsonl").write_text(reading(START + 20))
    late = tick(first.cursor)
    assert ranges(late) == [(KEYS[0], KEYS[2])], "late data replays every later epoch"
    assert ranges(tick(turned_on.cursor)) == [(KEYS[0], KEYS[2])], "and once turned on late"
    assert first.run_requests[0].run_key != late.run_requests[0].run_key
    (landing / "future.jsonl").write_text(reading(4_000_000_000_000))
    assert tick(late.cursor).run_requests == [], "epochs that do not exist yet are not requested"

    # The inputs step reads only the files that may hold events of its epochs, and new ones;
    # the others are known unchanged from earlier runs, bad lines included.
    check, metadata = store(KEYS[2], KEYS[2])
    assert _files(metadata) == (2, 3), "the two new files"
    # The lines of the two files read (one each), not the third's, known unchanged.
    assert (
        metadata["pomo/run_landing_lines_read"].value == 2 and metadata["pomo/new_rows"].value == 0
    )
    assert check.metadata["pomo/quarantined"].value == 1, "the old file's bad line is kept"
    check, metadata = store(KEYS[2], KEYS[2])
    assert _files(metadata) == (0, 3) and metadata["pomo/run_landing_lines_read"].value == 0
    assert check.metadata["pomo/quarantined"].value == 1
    check, metadata = store(KEYS[0], KEYS[0])
    assert _files(metadata) == (2, 3), "the first epoch's two files"
    assert metadata["pomo/new_rows"].value == 2, "the on-time reading and the late one"
    for damaged in ("[]", "{not json"):  # the record is a cache: unreadable, all is read
        (warehouse / "water_tanks" / "_landing.json").write_text(damaged)
        check, metadata = store(KEYS[2], KEYS[2])
        assert _files(metadata) == (3, 3)
        assert check.metadata["pomo/quarantined"].value == 1


def _files(metadata) -> tuple[int, int]:  # noqa: ANN001
    """(landing files the run read, landing files there were)."""
    return (
        metadata["pomo/run_landing_files_read"].value,
        metadata["pomo/run_landing_files"].value,
    )


def test_the_spark_resource_follows_the_same_variables_as_pomo_run(monkeypatch) -> None:
    """A deployment points its runs at a Spark Connect server or a cluster by environment,
    as `pomo run` is pointed; a master or URL given to the resource wins."""

    monkeypatch.delenv("POMO_SPARK_MASTER", raising=False)
    monkeypatch.delenv("POMO_SPARK_REMOTE", raising=False)
    plain = SparkResource().settings()
    assert (plain.master, plain.remote) == ("local[*]", None)
    monkeypatch.setenv("POMO_SPARK_REMOTE", "sc://spark:15002")
    assert SparkResource().settings(1).remote == "sc://spark:15002"
    assert SparkResource().settings(1).conf == {}, "no JVM options for a server's JVM"
    assert SparkResource(master="local[2]").settings().remote is None
    assert SparkResource(remote="sc://other:15002").settings().remote == "sc://other:15002"
    monkeypatch.delenv("POMO_SPARK_REMOTE")
    monkeypatch.setenv("POMO_SPARK_MASTER", "spark://host:7077")
    assert SparkResource().settings().master == "spark://host:7077"
    assert SparkResource(master="local[2]").settings().master == "local[2]"


def test_short_runs_start_spark_with_the_quick_compiler_only() -> None:
    """A run of one to three epochs in a new local JVM is over before the JIT's optimizing
    tier pays for itself (bench/cold_start.py); longer runs, remote Spark and Java options
    the user sets are left as they are."""
    from dagster_pomo.engine.settings import JAVA_OPTIONS, QUICK_JIT

    local = SparkResource()
    assert local.settings(1).conf[JAVA_OPTIONS] == QUICK_JIT
    assert local.settings(3).conf[JAVA_OPTIONS] == QUICK_JIT
    assert JAVA_OPTIONS not in local.settings(4).conf, "a backfill: the optimizing tier pays"
    assert JAVA_OPTIONS not in local.settings().conf
    mine = SparkResource(conf={JAVA_OPTIONS: "-Xss4m", "spark.sql.shuffle.partitions": "8"})
    assert mine.settings(1).conf == mine.conf
    assert JAVA_OPTIONS not in SparkResource(remote="sc://spark:15002").settings(1).conf
    assert JAVA_OPTIONS not in SparkResource(master="spark://host:7077").settings(1).conf


def _partition_metadata(instance: DagsterInstance, defs, keys: list[str]) -> dict:
    """Per (asset, partition): the metadata its latest materialization carries that is
    about the partition (not the run: no ``pomo/run_*`` key), previews as their rows."""
    out = {}
    for assets_def in defs.assets:
        for key in assets_def.keys:
            for partition in keys:
                records = instance.fetch_materializations(
                    AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
                ).records
                assert records, (key, partition)
                meta = records[0].asset_materialization.metadata
                out[(key.to_user_string(), partition)] = {
                    name: [r.data for r in value.value.records]
                    if name == "pomo/preview"
                    else value.value
                    for name, value in meta.items()
                    if not name.startswith("pomo/run_")
                    and name not in ("pomo/quarantine_sample", "pomo/quarantined")
                    and not name.startswith("pomo/ledger")
                }
    return out


def test_a_range_run_reports_each_partition_as_epoch_by_epoch_runs_do(tmp_path: Path) -> None:
    """What the UI shows of a partition is true of that partition: a run over three
    partitions attaches to each the rows it holds, the rows stored through it, a preview
    of its own rows and the actions its events came to, exactly what three runs of one
    partition each, in time order, record."""
    landing = tmp_path / "landing"
    landing.mkdir()
    water_tank_events(landing / "tanks.jsonl", 9_000, tanks=3, hours=3)  # alerts in hour 3
    seen = {}
    for way in ("range", "one by one"):
        root = tmp_path / way.replace(" ", "_")
        (root / "home").mkdir(parents=True)
        defs = _defs(RULES / "water_tanks.pomo", PARTITIONS, root / "warehouse", landing)
        instance = DagsterInstance.local_temp(str(root / "home"))
        if way == "range":
            _materialize_range(defs, instance, KEYS)
            assert len(instance.get_runs()) == 1
        else:
            materialize_each(defs, instance, KEYS)
        seen[way] = _partition_metadata(instance, defs, KEYS)
    assert seen["range"] == seen["one by one"]
    level = [seen["range"][("water_tanks/level_10m", k)] for k in KEYS]
    assert all(m["pomo/new_rows"] > 0 for m in level), "every hour has readings"
    totals = [m["pomo/rows_total"] for m in level]
    # Dagster's own keys, which its Catalog shows, say the same.
    assert [m["dagster/row_count"] for m in level] == totals
    assert [m["dagster/partition_row_count"] for m in level] == [m["pomo/new_rows"] for m in level]
    assert totals == [sum(m["pomo/new_rows"] for m in level[: i + 1]) for i in range(3)]
    actions = [seen["range"][("water_tanks/action/notify_operator", k)] for k in KEYS]
    assert sum(m["pomo/actions_ran"] for m in actions) > 0, "the case must raise alerts"


@pytest.mark.parametrize("corpus", sorted(RULES.glob("*.pomo")), ids=lambda p: p.stem)
def test_every_relation_asset_says_where_it_lives_what_defines_it_and_its_lineage(
    tmp_path: Path, corpus: Path
) -> None:
    """What a dagster-dbt user looks for on an asset, on every relation of every example:
    its storage location and table name, tags to filter by, code references to the lines
    of the corpus that define it, its comments in the description, and for a derived
    relation the columns of other assets each of its columns comes from (all of them real
    columns)."""
    defs = _defs(corpus, PARTITIONS, tmp_path / "warehouse", tmp_path / "landing")
    program = load_program(corpus)
    lines = corpus.read_text().splitlines()
    specs = {k: s for a in defs.assets for k, s in a.specs_by_key.items()}
    columns = {
        k: {c.name for c in s.metadata["dagster/column_schema"].columns}
        for k, s in specs.items()
        if "dagster/column_schema" in s.metadata
    }
    for rel in program.catalog:
        if rel.name == "clock":
            continue
        key = AssetKey([program.name, rel.name])
        meta = specs[key].metadata
        assert meta["dagster/table_name"] == f"{program.name}.{rel.name}"
        assert specs[key].tags["pomo/kind"] == ("input" if rel.is_input else "derived")
        assert meta["dagster/uri"] == f"{tmp_path / 'warehouse'}/{program.name}/{rel.name}"
        for ref in meta["dagster/code_references"].code_references:
            assert Path(ref.file_path) == corpus.resolve()
            assert rel.name in lines[ref.line_number - 1], (rel.name, ref)
        if rel.decl is not None and program.doc_comment(rel.decl):
            first = program.doc_comment(rel.decl).splitlines()[0]
            assert first in specs[key].description, rel.name
        if rel.derived:
            lineage = meta["dagster/column_lineage"].deps_by_column
            assert set(lineage) <= columns[key], rel.name
            for deps in lineage.values():
                for dep in deps:
                    assert dep.column_name in columns[dep.asset_key], (rel.name, dep)
    level = specs.get(AssetKey(["water_tanks", "near_capacity"]))
    if level is not None:  # the water tanks: a joined column comes from both sides
        tank = level.metadata["dagster/column_lineage"].deps_by_column["tank"]
        assert {d.asset_key.path[-1] for d in tank} == {"capacity", "level_10m"}
        average = level.metadata["dagster/column_lineage"].deps_by_column["average"]
        assert [(d.asset_key.path[-1], d.column_name) for d in average] == [
            ("level_10m", "average(level)")
        ]


def test_a_check_violated_in_a_partition_fails_its_asset_check_there(tmp_path: Path) -> None:
    """`.check` relations become asset checks: run partition by partition (as the sensor and
    the schedule run them), the partition holding a violation records a failed check, the
    others a passed one; a `@warn` check fails with a warning's severity."""
    from dagster import AssetCheckKey, AssetCheckSeverity

    corpus = tmp_path / "tanks.pomo"
    corpus.write_text(
        ".decl water_level(tank: str, level: float);\n"
        ".check negative_level(tank, level) := water_level(tank, level) if level < 0.0;\n"
        ".check high_level(tank) @warn := water_level(tank, level) if level > 90.0;\n"
    )
    landing = tmp_path / "landing"
    landing.mkdir()
    readings = [(0, "north", 10.0), (1, "north", -3.0), (1, "south", 95.0), (2, "north", 5.0)]
    (landing / "levels.jsonl").write_text(
        "".join(
            json.dumps({"relation": "water_level", "t": START + h * HOUR + 60_000, "args": [k, v]})
            + "\n"
            for h, k, v in readings
        )
    )
    defs = _defs(corpus, PARTITIONS, tmp_path / "warehouse", landing)
    home = tmp_path / "dagster_home"
    home.mkdir()
    instance = DagsterInstance.local_temp(str(home))
    assets = defs.resolve_all_asset_specs()
    everything = [a for a in defs.assets]  # noqa: C416 - every multi-asset of the corpus
    for key in KEYS:
        result = materialize(
            everything,
            instance=instance,
            resources=defs.resources,
            partition_key=key,
            raise_on_error=False,
        )
        assert result.success == (key != KEYS[1])  # the failed error-level check fails the run
    storage = instance.event_log_storage
    verdicts = {}
    for name in ("negative_level", "high_level"):
        check = AssetCheckKey(AssetKey(["tanks", name]), "no_violation")
        records = storage.get_asset_check_execution_history(check, limit=10)
        evaluations = {r.partition: r.event.dagster_event.event_specific_data for r in records}
        verdicts[name] = {k: (e.passed, e.severity) for k, e in evaluations.items()}
    assert len(assets) >= 3
    assert verdicts["negative_level"] == {
        KEYS[0]: (True, AssetCheckSeverity.ERROR),
        KEYS[1]: (False, AssetCheckSeverity.ERROR),
        KEYS[2]: (True, AssetCheckSeverity.ERROR),
    }
    assert verdicts["high_level"] == {
        KEYS[0]: (True, AssetCheckSeverity.WARN),
        KEYS[1]: (False, AssetCheckSeverity.WARN),
        KEYS[2]: (True, AssetCheckSeverity.WARN),
    }


def test_a_partition_s_preview_shows_the_provenance_an_epoch_by_epoch_run_records(
    tmp_path: Path, capsys
) -> None:
    """With `@provenance` on the alert, each materialized partition's preview carries every
    alert's sources as `pomo run` epoch by epoch records them for that epoch, and every
    source is the content ID of a landed reading or a corpus fact. The asset's
    `pomo/explain` command, run for a previewed alert, explains it from the warehouse down
    to landed readings that are among its sources."""
    import shlex

    from dagster_pomo.cli.main import main
    from dagster_pomo.engine.cid import cid
    from dagster_pomo.engine.explain import Derivation
    from dagster_pomo.engine.ingest import corpus_facts
    from dagster_pomo.orchestration.metadata import _sources
    from tests.compare import policy

    text = (RULES / "water_tanks.pomo").read_text()
    asked = text.replace(
        "overflow_alert(tank) @time(m) ~ notify_operator :=",
        "overflow_alert(tank) @time(m) @provenance ~ notify_operator :=",
    )
    assert asked != text
    corpus = tmp_path / "water_tanks.pomo"
    corpus.write_text(asked)
    landing = tmp_path / "landing"
    landing.mkdir()
    water_tank_events(landing / "tanks.jsonl", 9_000, tanks=3, hours=3)  # alerts by the third
    defs = _defs(corpus, PARTITIONS, tmp_path / "warehouse", landing)
    home = tmp_path / "dagster_home"
    home.mkdir()
    instance = DagsterInstance.local_temp(str(home))
    previews = {}
    for key in KEYS:  # as a schedule runs them
        result = materialize(
            list(defs.assets), instance=instance, resources=dict(defs.resources), partition_key=key
        )
        assert result.success
        (event,) = result.asset_materializations_for_node("water_tanks__overflow_alert")
        previews[key] = event.metadata["pomo/preview"].value

    program = load_program(corpus)
    epoch_by_epoch = policy(in_process=True, one_pass=False)
    recorded = run(program, landing, HOUR, START, START + 3 * HOUR, policy=epoch_by_epoch)
    landed = [json.loads(line) for line in (landing / "tanks.jsonl").read_text().splitlines()]
    sources = {cid(e["relation"], list(e["args"].values()), e["t"]) for e in landed}
    sources |= {
        cid(name, list(r.args), r.t) for name, rows in corpus_facts(program).items() for r in rows
    }
    alerts = recorded.versions["overflow_alert"]
    assert alerts and all(v.prov and set(v.prov) <= sources for v in alerts)
    shown = 0
    for i, key in enumerate(KEYS):
        start = START + i * HOUR
        mine = {
            (v_when(v), v.args[0], v_when(v, "kt")): v
            for v in alerts
            if start <= v.kt < start + HOUR
        }
        for record in previews[key].records:
            when, known = (datetime.fromisoformat(record.data[c]) for c in ("t", "kt"))
            at = (when, record.data["tank"], known)
            assert record.data["provenance"] == _sources(mine[at].prov), at
            assert record.data["cid"] == cid("overflow_alert", list(mine[at].args), mine[at].t)
            shown += 1
    assert shown > 0

    spec = next(s for a in defs.assets for s in a.specs if s.key.path[-1] == "overflow_alert")
    command = spec.metadata["pomo/explain"].value.split("```")[1].strip()
    record = previews[KEYS[-1]].records[0]
    argv = [a.replace("TIME", record.data["t"]) for a in shlex.split(command)[1:]]
    assert main([*argv, "--json"]) == 0
    (explained, *_) = json.loads(capsys.readouterr().out)
    leaves = [d for d in Derivation.from_json(explained).walk() if d.how == "input"]
    readings = {cid(d.relation, list(d.args), d.t) for d in leaves}
    when = datetime.fromisoformat(record.data["t"])
    # `pomo explain` explains an event as first derived: its earliest version.
    first = min(
        (v for v in alerts if v.args[0] == record.data["tank"] and v_when(v) == when),
        key=lambda v: v.kt,
    )
    assert readings and readings <= set(first.prov)


def v_when(version, column: str = "t") -> datetime:  # noqa: ANN001
    return datetime.fromtimestamp(getattr(version, column) / 1000, UTC)


def test_an_inputs_step_read_by_spark_stores_what_one_read_here_stores(tmp_path: Path) -> None:
    """Landing files read by Spark's tasks (`SparkResource(spark_landing_bytes=0)`) give
    the inputs step's partitions the same events, data versions, landing index, quarantine
    and counts as when the run's process reads them: for a range that starts after the
    first epoch (earlier events left out), then for the first."""
    from dagster_pomo.orchestration import SparkResource

    landing = tmp_path / "landing"
    landing.mkdir()
    water_tank_events(landing / "tanks.jsonl", 3_000, tanks=3, hours=3)
    with (landing / "tanks.jsonl").open("a") as lines:
        lines.write('{"relation": "water_level", "t": "noon", "args": ["north", 1.0]}\n')
    (landing / "late.jsonl").write_text(
        json.dumps({"relation": "maintenance", "t": START + 90 * 60_000, "args": ["east", "x"]})
        + "\n"
    )
    inputs = {"water_level", "maintenance", "capacity"}
    seen: dict[str, dict] = {}
    for reader, spark in (("here", SparkResource(spark_landing_bytes=-1)), ("spark", None)):
        spark = spark or SparkResource(spark_landing_bytes=0)
        warehouse = tmp_path / reader / "warehouse"
        defs = _defs(RULES / "water_tanks.pomo", PARTITIONS, warehouse, landing, spark=spark)
        home = tmp_path / reader / "home"
        home.mkdir(parents=True)
        instance = DagsterInstance.local_temp(str(home))
        step = [a for a in defs.assets if AssetKey(["water_tanks", "water_level"]) in a.keys]
        resources = dict(defs.resources)
        metadata = {}
        for first, last in ((KEYS[1], KEYS[2]), (KEYS[0], KEYS[0])):
            done = materialize(
                step,
                instance=instance,
                resources=resources,
                tags={
                    "dagster/asset_partition_range_start": first,
                    "dagster/asset_partition_range_end": last,
                },
            )
            assert done.success
            (event, *_) = done.asset_materializations_for_node("water_tanks__inputs")
            metadata[first] = {
                k: v.value
                for k, v in event.metadata.items()
                if k.startswith("pomo/run_landing") or k == "pomo/quarantined"
            }
        versions = {}
        for name in sorted(inputs):
            for record in instance.fetch_materializations(
                AssetKey(["water_tanks", name]), limit=100
            ).records:
                tags = record.asset_materialization.tags  # type: ignore[union-attr]
                versions[(name, record.partition_key)] = tags["dagster/data_version"]
        program = load_program(RULES / "water_tanks.pomo")
        epochs = epochs_through(PARTITIONS, KEYS[-1])
        driver = Driver.open(program, infer_schemas(program, {}), str(warehouse), epochs, START)
        seen[reader] = {
            "events": {n: sorted(map(repr, driver.versions(n))) for n in sorted(inputs)},
            "versions": versions,
            "metadata": metadata,
            "index": json.loads((warehouse / "water_tanks" / "_landing.json").read_text()),
            "quarantine": (warehouse / "water_tanks" / "_quarantine.jsonl").read_text(),
        }
    here, spark = seen["here"], seen["spark"]
    assert len(here["events"]["water_level"]) == 3_000 and here["events"]["maintenance"]
    assert len(here["versions"]) == 3 * len(KEYS), here["versions"]
    assert "noon" in here["quarantine"]
    # What each input epoch was stored from is recorded where this process read the
    # files (so that the next step keeps what they leave unchanged), not by Spark's tasks.
    assert len(here["index"].pop("epochs")) == len(KEYS) and spark["index"].pop("epochs") == {}
    for part in here:
        assert spark[part] == here[part], part


@pytest.mark.parametrize("reader", ["process", "spark"])
def test_a_landing_that_repeats_its_events_stores_what_one_copy_stores(
    tmp_path: Path, reader: str
) -> None:
    """Every reading landed again in another file, written another way (ISO time with an
    offset, arguments as a list, ``-0.0`` for ``0.0``): a Dagster run over the range, its
    landing read in the run's process or by Spark's tasks, stores what the landing with one
    copy stores: every aggregate counts each reading once."""

    once, twice = tmp_path / "once", tmp_path / "twice"
    once.mkdir()
    twice.mkdir()
    water_tank_events(once / "tanks.jsonl", 600, tanks=3, hours=3)
    lines = (once / "tanks.jsonl").read_text().splitlines()
    (twice / "tanks.jsonl").write_text("\n".join(lines) + "\n")
    again = []
    for line in lines:
        event = json.loads(line)
        t = datetime.fromtimestamp(event["t"] / 1000, UTC) + timedelta(hours=1)
        event["t"] = t.isoformat(timespec="milliseconds").replace("+00:00", "+01:00")
        event["args"] = [(-0.0 if v == 0 else v) for v in event["args"].values()]
        again.append(json.dumps(event))
    (twice / "again.jsonl").write_text("\n".join(again) + "\n")
    spark = SparkResource(spark_landing_bytes=0 if reader == "spark" else -1)
    program = load_program(RULES / "water_tanks.pomo")
    got = {}
    for name, landing in (("once", once), ("twice", twice)):
        warehouse = tmp_path / f"warehouse-{name}"
        defs = _defs(RULES / "water_tanks.pomo", PARTITIONS, warehouse, landing, spark)
        home = tmp_path / f"home-{name}"
        home.mkdir()
        result = materialize(
            list(defs.assets),
            instance=DagsterInstance.local_temp(str(home)),
            resources=dict(defs.resources),
            tags={
                "dagster/asset_partition_range_start": KEYS[0],
                "dagster/asset_partition_range_end": KEYS[-1],
            },
        )
        assert result.success
        got[name] = stored(program, warehouse, {"level_per_minute", "level_10m"})
    # One version per reading and per expiry while a reading lives: each reading once.
    versions = window_versions(lines, 10 * 60_000, START + len(KEYS) * HOUR)
    assert got["twice"] == got["once"] and len(got["once"]["level_10m"]) == versions
