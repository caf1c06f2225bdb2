"""``pomo demo``: the water-tank pipeline through Dagster, end to end, on the defaults.

Generates readings, builds the corpus's Dagster definitions, materializes every
epoch in one run on a throw-away Dagster instance with local Spark, started when a plan
needs it (or the Spark
that ``POMO_SPARK_MASTER`` or ``POMO_SPARK_REMOTE`` names), and prints
what each relation holds and what each action handler did.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from dagster_pomo.errors import UsageError
from dagster_pomo.examples import CORPORA

CORPUS = CORPORA / "water_tanks.pomo"


def run_demo(
    folder: Path | None,
    hours: int,
    readings: int,
    ledger: str | None = None,
    progress: bool = False,
) -> int:
    """Run the demo in ``folder`` (a temporary one, removed afterwards, when ``None``), its
    action ledger at ``ledger`` (a folder or a PostgreSQL URL; default: the warehouse),
    drawing the run's progress on stderr when ``progress``."""
    if not CORPUS.is_file():
        raise UsageError(f"{CORPUS} is missing: reinstall dagster-pomo")
    keep = folder is not None
    work = folder or Path(tempfile.mkdtemp(prefix="pomo-demo-"))
    try:
        return _demo(work, hours, readings, keep, ledger, progress)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def _demo(
    work: Path, hours: int, readings: int, keep: bool, ledger: str | None, progress: bool
) -> int:
    from dagster import AssetKey, DagsterInstance, HourlyPartitionsDefinition, materialize

    from dagster_pomo.cli.progress import materializing
    from dagster_pomo.engine.ledger import is_postgres, shown
    from dagster_pomo.examples import DEFAULT_START, HOUR, outbox_handlers, water_tank_events
    from dagster_pomo.orchestration import pomo_definitions
    from dagster_pomo.orchestration.resources import SparkResource

    began = time.perf_counter()
    landing, warehouse, home = work / "landing", work / "warehouse", work / "dagster_home"
    for d in (landing, home):
        d.mkdir(parents=True, exist_ok=True)
    start = DEFAULT_START
    lines = water_tank_events(
        landing / "readings.jsonl", readings, tanks=3, hours=hours, start=start
    )
    print(f"1. generated {lines:,} events of 3 water tanks over {hours} h in {landing}")

    outbox = work / "outbox.sqlite"
    handlers = outbox_handlers(CORPUS, outbox)
    partitions = HourlyPartitionsDefinition(start_date="2023-11-14-22:00")
    defs = pomo_definitions(
        CORPUS, partitions, str(warehouse), str(landing), handlers=handlers, ledger=ledger
    )
    keys = partitions.get_partition_keys_in_range(
        _range(partitions, start, start + hours * HOUR - 1)
    )
    assets = list(defs.assets)
    # What the UI lists: a relation or a handler an asset (a multi-asset is one step).
    asset_keys = sorted({key for a in assets for key in a.keys})  # type: ignore[union-attr]
    n_keys = len(asset_keys)
    spark = SparkResource().settings()
    where = f"Spark at {spark.remote}" if spark.remote else f"Spark ({spark.master})"
    if spark.master == "local[*]" and not spark.remote:  # a JVM only once a plan needs one
        where = "local Spark, started when a plan needs it"
    print(
        f"2. {CORPUS.name}: {n_keys} Dagster assets in {len(assets)} steps, {len(keys)} hourly "
        "partitions "
        f"({keys[0]} to {keys[-1]}); materializing them in one run on {where}..."
    )
    instance = DagsterInstance.local_temp(str(home))
    with materializing(progress, instance, asset_keys, len(keys)):
        result = materialize(
            assets,
            instance=instance,
            resources=dict(defs.resources),
            tags={
                "dagster/asset_partition_range_start": keys[0],
                "dagster/asset_partition_range_end": keys[-1],
            },
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            raise_on_error=False,
        )
    if not result.success:
        print("   the run failed; see the errors above")
        return 1

    print("3. derived (rows stored in the warehouse):")
    latest: dict[AssetKey, dict] = {}  # one materialization per partition: same metadata
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization  # type: ignore[union-attr]
        latest[mat.asset_key] = mat.metadata
    actions: dict[str, int] = {}
    for key, meta in latest.items():
        if key.path[1] == "action":
            actions[key.path[2]] = int(meta["pomo/actions_ran"].value)
        elif "pomo/rows_total" in meta:
            print(f"   {key.path[1]:<20} {int(meta['pomo/rows_total'].value):>9,}")
    print("4. actions (each event once, recorded in the outbox):")
    for name, ran in sorted(actions.items()):
        print(f"   {name:<20} {ran:>9,} ran")
    effects = handlers[next(iter(handlers))].effects()
    for handler, relation, args, t in effects[:5]:
        when = datetime.fromtimestamp(t / 1000, UTC).strftime("%H:%M:%S")
        print(f"   e.g. {handler}: {relation} {args} at {when}")
    where = f"kept in {work}" if keep else "in a temporary folder, now removed"
    location = defs.resources["storage"].ledger_location(CORPUS.stem)  # type: ignore[union-attr]
    if is_postgres(location):
        print(f"   the ledger: {shown(location)}")
        print(f"done in {time.perf_counter() - began:.0f} s; warehouse and outbox {where}")
    else:
        print(f"done in {time.perf_counter() - began:.0f} s; warehouse, ledger and outbox {where}")
    return 0


def _range(partitions, first_ms: int, last_ms: int):  # noqa: ANN001, ANN202
    from dagster import PartitionKeyRange

    return PartitionKeyRange(
        partitions.get_partition_key_for_timestamp(first_ms / 1000),
        partitions.get_partition_key_for_timestamp(last_ms / 1000),
    )
