"""What an epoch's Spark jobs carry: the epoch's job group, counted at its end, and for a
small epoch's plans, Spark's settings for running them without generated code."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import SparkSession

from dagster_pomo.engine.spark.lookups import is_connect
from dagster_pomo.engine.spark.session import LazySession, started

# Spark's settings for plans run without generated code (see `interpreted`). The second is
# internal to Spark; without it, Spark still generates each expression's code.
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


@dataclass
class JobCount:
    """The Spark jobs of a group once its block has ended (None: Spark Connect, which does
    not say; 0: Spark never started)."""

    jobs: int | None = 0


@contextmanager
def counted_jobs(spark: SparkSession | LazySession, group: str, about: str) -> Iterator[JobCount]:
    """Within this block Spark's jobs carry the job group ``group`` (described as ``about``),
    also when the session starts within it; how many ran is in the count given once the
    block ends. Spark keeps a group's jobs across blocks of the same group (and sessions
    of one process): only this block's are counted."""
    count = JobCount()
    lazy = spark if isinstance(spark, LazySession) else None
    if lazy is not None:
        lazy.job_group = (group, about)  # the session gets it if it starts within the block
        lazy.earlier_jobs = set()
    running = started(spark)
    classic = not is_connect(spark)
    earlier: set[int] = set()
    if classic and running is not None:
        running.sparkContext.setJobGroup(group, about)
        earlier = set(running.sparkContext.statusTracker().getJobIdsForGroup(group))
    try:
        yield count
    finally:
        if lazy is not None:
            lazy.job_group = None
            earlier |= lazy.earlier_jobs  # the group's jobs when it started within the block
        running = started(spark)
        if not classic:
            count.jobs = None
        elif running is not None:
            tracker = running.sparkContext.statusTracker()
            count.jobs = len(set(tracker.getJobIdsForGroup(group)) - earlier)
            running.sparkContext.setJobGroup("pomo", "idle")


@contextmanager
def interpreted(spark: SparkSession | LazySession) -> Iterator[bool]:
    """Within this block Spark runs plans without generated code, unless somebody has set
    its code generation otherwise (the block is given whether it runs so); the session's
    settings are as they were afterwards.

    Spark writes an epoch's bounds into the code it generates, so each epoch compiled its
    stages' classes anew and the JIT compiled them again: half the CPU of a small epoch,
    more than interpreting its few rows costs. A large epoch's rows repay the compiling."""
    if any(spark.conf.get(k, None) is not None for k in INTERPRETED):
        yield False
        return
    for k, v in INTERPRETED.items():
        spark.conf.set(k, v)
    try:
        yield True
    finally:
        for k in INTERPRETED:
            spark.conf.unset(k)
