"""How the engine may run a corpus: choices that change its speed, never what it stores,
and the budgets that stop a run asking for too much (`budgets.Budgets`).

One explicit object, given to the evaluator by whoever starts a run (``pomo run``'s flags,
the Dagster `SparkResource`'s config, the benchmarks), instead of settings flipped on
classes. Every combination stores the same versions; the tests run several to check it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dagster_pomo.engine.budgets import Budgets
from dagster_pomo.errors import UsageError

# Where the driver works a corpus's strata out (the first is the default): `auto`, this
# process for small epochs and Spark's plans for the rest (`Policy.in_process_inputs`);
# `local`, this process alone, Spark never started (no JVM needed); `spark`, Spark's
# plans alone.
DRIVER_ENGINES = ("auto", "local", "spark")


@dataclass(frozen=True)
class Policy:
    # Evaluate a range of epochs in one pass where that stores what epoch by epoch stores
    # (see `SparkEvaluator.span`); False: epoch by epoch, as a schedule does.
    one_pass: bool = True
    # A deductive stratum of an epoch of at most this many input events is worked out in
    # this process, not by Spark's plans (see `LocalStrata.takes`); 0: never. On two
    # cores the process is about three times as fast at 625,000 water-tank readings an
    # epoch (docs/operations.md); on a machine of many cores, where Spark's tasks spread an
    # epoch wide, lower it.
    in_process_inputs: int = 1_000_000
    # A range of at most this many epochs, each holding at most `in_process_inputs` input
    # events, whose strata this process can work out, goes epoch by epoch in this process
    # rather than in one Spark pass (see `LocalStrata.few_and_small`); 0: never. From a
    # fresh process on two cores that was faster at every size measured (BENCHMARKS.md, W5).
    in_process_epochs: int = 200
    # The most matches a join may make in this process; beyond, the stratum goes to Spark.
    local_matches: int = 2_000_000
    # An epoch of at most this many input events runs its strata's plans without generated
    # code (see `SparkEvaluator.plans_for`); below 0: never.
    interpret_inputs: int = 50_000
    # The later rounds of a recursion run inside Spark tasks while a task knows at most
    # this many versions (a linear one's: `linear_fixpoint`, spread over more tasks when
    # they outgrow it; another's, in one task: `task_rounds`); 0: Spark's rounds only.
    task_rows: int = 4_000_000
    # ... and only when each lower relation they join has at most this many rows. A
    # recursion reading at most this many versions of each relation also runs in this
    # process (`LocalStrata.takes`: in a large epoch, or on a cluster); 0: never.
    lower_rows: int = 200_000
    # Stored epochs that Spark's plans read from a warehouse on this machine's disk, at most
    # this many versions together, are read by this process and go into the plans as a
    # local relation (see `Warehouse.read_stored`): no file listing, data-source lookup or
    # scan task (a small water-tank epoch 1.01 -> 0.91 s, docs/operations.md); 0: Spark's
    # scans always.
    plan_rows: int = 10_000
    # A landing of more bytes than this is read by Spark's tasks, not by this process (see
    # `engine.spark.landing`); below 0: never.
    spark_landing_bytes: int = 256 << 20
    # A pipeline's step evaluates, of its run's epochs, only those that something stored
    # since their versions reaches (see `engine.reach`); False: every epoch of the run
    # (after changing a registered lattice function, which the records cannot see).
    reach: bool = True
    # How much one epoch may ask for before the run stops with a located error.
    budgets: Budgets = Budgets()
    # Every stratum of every epoch worked out in this process, epoch by epoch, and Spark
    # never started (``--engine local``): no JVM needed. A construct the local executor
    # lacks, or an epoch too large for it, is an error saying so, not a quiet fallback.
    local_only: bool = False

    def for_engine(self, engine: str) -> Policy:
        """This policy as ``engine`` (one of `DRIVER_ENGINES`) runs a corpus."""
        if engine == "local":
            return replace(self, local_only=True, spark_landing_bytes=-1)
        if engine == "spark":
            return replace(self, in_process_inputs=0, local_only=False)
        if engine != "auto":
            raise UsageError(f"no engine {engine!r}: one of {', '.join(DRIVER_ENGINES)}")
        return self


DEFAULT = Policy()
