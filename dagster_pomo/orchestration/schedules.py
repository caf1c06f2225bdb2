"""The epoch schedule: each epoch is materialized once it is complete, at its end plus the
pipeline's maximum skew (docs/semantics.md, Late events), when events up to its end can
be assumed landed.

(No ``from __future__ import annotations`` here: Dagster reads the schedule's annotations
at runtime.)
"""

from datetime import timedelta
from typing import TYPE_CHECKING

from dagster import (
    FreshnessPolicy,
    RunRequest,
    ScheduleEvaluationContext,
    SkipReason,
    TimeWindowPartitionsDefinition,
    schedule,
)

if TYPE_CHECKING:  # not exported by dagster: for the type checker only
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

from dagster_pomo.lang import Program


def complete_epoch(
    partitions_def: TimeWindowPartitionsDefinition, now_ms: int, skew_ms: int
) -> str | None:
    """The latest partition whose end plus ``skew_ms`` is not after ``now_ms``."""
    horizon = now_ms - skew_ms
    key = partitions_def.get_partition_key_for_timestamp((horizon - 1) / 1000)
    window = partitions_def.time_window_for_partition_key(key)
    if window.end.timestamp() * 1000 > horizon:
        key = partitions_def.get_partition_key_for_timestamp(window.start.timestamp() - 0.001)
    return key if partitions_def.has_partition_key(key) else None


DAY = 86_400_000


def shifted_cron(epoch_minutes: int, skew_minutes: int) -> str:
    """A cron firing ``skew_minutes`` after the end of every epoch of ``epoch_minutes``
    (which divides a day), epochs aligned to midnight UTC."""
    ends = sorted({(k * epoch_minutes + skew_minutes) % 1440 for k in range(1440 // epoch_minutes)})
    minutes = sorted({m % 60 for m in ends})
    hours = sorted({m // 60 for m in ends})
    if len(minutes) * len(hours) != len(ends):  # no single cron: tick every minute
        return "* * * * *"
    minute = "*" if len(minutes) == 60 else ",".join(map(str, minutes))
    hour = "*" if len(hours) == 24 else ",".join(map(str, hours))
    return f"{minute} {hour} * * *"


def epoch_ms(partitions_def: TimeWindowPartitionsDefinition) -> int:
    """How long each partition (epoch) is, in milliseconds."""
    first = partitions_def.get_first_partition_window()
    return int(first.end.timestamp() * 1000) - int(first.start.timestamp() * 1000)


def epoch_cron(partitions_def: TimeWindowPartitionsDefinition, after_ms: int) -> str:
    """A cron firing ``after_ms`` (rounded up to minutes: cron has minutes) after the end of
    every partition."""
    minutes = -(-after_ms // 60_000)
    size = epoch_ms(partitions_def)
    if 60_000 <= size <= DAY and DAY % size == 0 and size % 60_000 == 0:
        return shifted_cron(size // 60_000, minutes)
    if getattr(partitions_def.schedule_type, "name", None) == "HOURLY":
        return partitions_def.get_cron_schedule(minute_of_hour=minutes % 60)
    return partitions_def.get_cron_schedule(
        minute_of_hour=minutes % 60, hour_of_day=(minutes // 60) % 24
    )


def epoch_freshness(partitions_def: TimeWindowPartitionsDefinition, due_ms: int) -> FreshnessPolicy:
    """Each epoch's assets materialized by ``due_ms`` after the epoch's end, and not more
    than an epoch (Dagster's bound: the deadline's interval) before that deadline.
    Dagster looks at the latest materialization of any partition: a backfill of old
    epochs counts too."""
    cron = epoch_cron(partitions_def, due_ms)
    due = -(-due_ms // 60_000) * 60_000
    window = 60_000 if cron == "* * * * *" else min(due, epoch_ms(partitions_def))
    return FreshnessPolicy.cron(
        deadline_cron=cron, lower_bound_delta=timedelta(milliseconds=window), timezone="UTC"
    )


def epoch_schedule(
    program: Program,
    partitions_def: TimeWindowPartitionsDefinition,
    job: "UnresolvedAssetJobDefinition",
    skew_ms: int = 0,
):
    """Fires ``skew`` after each epoch ends and launches ``job`` (the corpus's) for that
    epoch (once: the run key is the partition key)."""
    # The cron only sets when ticks happen; `complete_epoch` decides what is complete.
    cron = epoch_cron(partitions_def, skew_ms)
    minutes = -(-skew_ms // 60_000)

    @schedule(
        name=f"{program.name}__epochs",
        cron_schedule=cron,
        target=job,
        execution_timezone="UTC",
        description=f"Each complete epoch of `{program.name}`, {minutes} min after it ends.",
    )
    def epochs(context: ScheduleEvaluationContext):
        now = context.scheduled_execution_time + timedelta(seconds=1)
        key = complete_epoch(partitions_def, int(now.timestamp() * 1000), skew_ms)
        if key is None:
            return SkipReason("no complete epoch yet")
        return RunRequest(partition_key=key, run_key=key)

    return epochs
