"""The landing sensor: new landing files become runs for the epochs their events fall in.

The cursor remembers every landing file seen (name, size, modification time), so a tick only
reads new or grown files, and the same file never starts a run twice (run keys). A file with
events for an epoch that is already materialized is late (docs/semantics.md, Late events):
that epoch and every later materialized one are requested again, in time order, in one run.
A sensor turned on after a backfill starts from what the inputs step has read: a file it
read as the file is now requests only the epochs not yet materialized.

(No ``from __future__ import annotations`` here: Dagster reads the sensor's
annotations at runtime.)
"""

import json
from typing import TYPE_CHECKING

from dagster import (
    AssetKey,
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    TimeWindowPartitionsDefinition,
    sensor,
)

if TYPE_CHECKING:  # not exported by dagster: for the type checker only
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

from dagster_pomo.engine.lines import safe
from dagster_pomo.engine.pipeline import event_times, fresh_files
from dagster_pomo.lang import Program
from dagster_pomo.orchestration.resources import PomoStorage


def partitions_for(partitions_def: TimeWindowPartitionsDefinition, times: list[int]) -> set[str]:
    """Partition keys holding ``times``; times before the first partition belong to it, times
    of partitions that do not exist yet wait for them (the schedule picks them up)."""
    first = partitions_def.get_first_partition_key()
    if first is None:
        return set()
    start = partitions_def.time_window_for_partition_key(first).start.timestamp() * 1000
    keys = {partitions_def.get_partition_key_for_timestamp(max(t, start) / 1000) for t in times}
    return {k for k in keys if partitions_def.has_partition_key(k)}


def landing_sensor(
    program: Program,
    job: "UnresolvedAssetJobDefinition",
    partitions_def: TimeWindowPartitionsDefinition,
    input_key: AssetKey,
    minimum_interval_seconds: int = 30,
    running: bool = False,
):
    """A sensor that launches ``job`` (the corpus's, partitioned by ``partitions_def``) for
    the epochs new landing files touch; on from the start when ``running`` (else a user
    turns it on)."""

    @sensor(
        name=f"{program.name}__landing",
        job=job,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING if running else DefaultSensorStatus.STOPPED,
        description=f"New landing files (JSON Lines, Parquet) of `{program.name}`.",
    )
    def watch(context: SensorEvaluationContext, storage: PomoStorage):
        seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
        fresh = fresh_files(storage.landing, seen)
        if not fresh:
            return SkipReason("no new or changed landing files")
        # Files the inputs step has already read as they are now (a backfill ran before the
        # sensor was turned on): their events are stored for every materialized epoch.
        ingested = storage.storage().read_files(program.name) if not context.cursor else {}
        done = context.instance.get_materialized_partitions(input_key)
        touched: set[str] = set()
        late_files: set[str] = set()
        moving: set[str] = set()  # the files that ask for an epoch to run
        window = storage.window()
        for path, signature in fresh.items():
            try:
                keys = partitions_for(partitions_def, event_times(path, window))
            except OSError as exc:  # removed or unreadable since it was listed: next tick
                context.log.warning(f"{path.name}: {exc}")
                continue
            if ingested.get(str(path)) == signature:
                keys -= done  # stored already: only epochs not yet run need it
            else:
                late_files |= keys & done
            touched |= keys
            if keys:
                moving.add(path.name)
            seen[path.name] = signature
        late = sorted(late_files)
        if late:  # a late file: its epochs and every later materialized epoch go stale
            touched |= {k for k in done if k >= late[0]}
        if not touched:
            return SensorResult(
                skip_reason=SkipReason("the new files hold no event of an existing epoch"),
                cursor=json.dumps(seen, sort_keys=True),
            )
        first, last = min(touched), max(touched)
        stamp = ",".join(f"{path.name}@{signature}" for path, signature in fresh.items())
        # One run over the whole range keeps the epochs in time order (a run per epoch could
        # run concurrently); epochs in between are evaluated again, which changes nothing.
        request = RunRequest(
            run_key=f"{first}..{last}|{stamp}",
            tags={
                "dagster/asset_partition_range_start": first,
                "dagster/asset_partition_range_end": last,
            },
        )
        note = f", late for {late[0]}" if late else ""
        n = len(moving)
        files = f"{n} new or changed file{'s' if n != 1 else ''}"
        context.log.info(
            f"{files} ({safe(', '.join(sorted(moving)), 200)}): epochs {first} to {last}{note}"
        )
        return SensorResult(run_requests=[request], cursor=json.dumps(seen, sort_keys=True))

    return watch
