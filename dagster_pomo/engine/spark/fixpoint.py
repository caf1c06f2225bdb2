"""Recursive strata on Spark, run semi-naive to their fixpoint.

After one full round, each round joins only the previous round's new versions (one Spark
job a round). A relation so far is a union of stored pieces laid out alike, so the
anti-joins that find what is new need no shuffle. The rounds of a linear stratum after
the first run inside Spark tasks when they can (see `linear_fixpoint`), and may write the
epoch
themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Protocol

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import BooleanType, LongType, StructField, StructType

from dagster_pomo.engine import interpreter
from dagster_pomo.engine.budgets import Budgets
from dagster_pomo.engine.local import column_joins, linear_fixpoint, task_rounds
from dagster_pomo.engine.local import stratum as local_stratum
from dagster_pomo.engine.policy import Policy
from dagster_pomo.engine.spark import rule_frames as R
from dagster_pomo.engine.spark.estimates import bounded
from dagster_pomo.engine.spark.lookups import is_connect
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.plan import linear_rounds
from dagster_pomo.plan import time as time_rules
from dagster_pomo.plan.corpus import CorpusPlan, StratumPlan
from dagster_pomo.plan.rules import RulePlan
from dagster_pomo.plan.schema import PROV, Schema
from dagster_pomo.timeline import Epoch, epoch_key


class Host(Protocol):
    """What a recursion needs of the backend whose strata it runs (`SparkEvaluator`): its
    session, warehouse and settings, the state of an epoch, the rules' plans as
    DataFrames, and the merging of versions."""

    spark: SparkSession
    wh: Warehouse
    plan: CorpusPlan
    policy: Policy
    schemas: Mapping[str, Schema]
    structs: Mapping[str, StructType]
    defers: frozenset[str]
    partitions: int

    def local_spark(self) -> bool: ...
    def tasks_have_project(self) -> bool: ...
    def is_range(self, epoch: Epoch) -> bool: ...
    def state(self, name: str, epoch: Epoch) -> DataFrame: ...
    def history(self, name: str, epoch: Epoch) -> DataFrame: ...
    def hold(self, epoch: Epoch, name: str, rows: DataFrame) -> None: ...
    def empty(self, name: str) -> DataFrame: ...
    def derive(
        self,
        rule: RulePlan,
        epoch: Epoch,
        source: dict[int, DataFrame] | None = None,
        held: Mapping[str, DataFrame] | None = None,
    ) -> DataFrame: ...
    def version_key(self, name: str) -> list[str]: ...
    def dedupe(self, name: str, df: DataFrame, by: Sequence[str] = ()) -> DataFrame: ...
    def budgets_for(self, epoch: Epoch) -> Budgets: ...


# Executors get the rounds' code and the shapes of their plans with each task (see
# `Recursion._rounds_in_tasks`).
cloudpickle.register_pickle_by_value(linear_fixpoint)
cloudpickle.register_pickle_by_value(column_joins)
cloudpickle.register_pickle_by_value(linear_rounds)
cloudpickle.register_pickle_by_value(time_rules)


@dataclass
class _Fixpoint:
    """What the rounds of one recursive stratum share (strata may run at the same time)."""

    # Lower strata's relations the stratum joins, held in memory while its rounds run,
    # rather than read again (and broadcast from files) every round.
    held: dict[str, DataFrame]
    # Each relation's versions so far: one stored piece per round, each paired with its
    # version key renamed for the anti-join (built once: building plans is not free).
    pieces: dict[str, list[tuple[DataFrame, DataFrame]]] = field(default_factory=dict)
    # Relations whose epoch the rounds' tasks wrote themselves, and how many rows each.
    written: dict[str, int] = field(default_factory=dict)
    # Rows of each relation's pieces so far (a version may repeat across pieces).
    rows: dict[str, int] = field(default_factory=dict)
    # Scratch folders of pieces stored as files (see `Recursion._through_files`).
    scratch: list[str] = field(default_factory=list)


class Recursion:
    """Runs an evaluator's recursive strata: semi-naive rounds, each one Spark job, and those
    of a linear stratum after the first inside Spark tasks when they can (see
    `linear_fixpoint`).
    Set up once per evaluator: how each recursive relation's pieces are laid out."""

    PIECES = 16  # rounds' pieces a recursive relation's union holds before it is stored as one
    # A relation of at most SMALL_ROWS versions so far is stored as one piece again every
    # other round: storing it costs a small job, while planning a round's anti-joins against
    # many pieces cost more (100 single-row rounds: 0.19 s a round against 0.47 s).
    SMALL_ROWS = 100_000
    MOST_TASKS = 1024  # the most tasks a relation's rounds in tasks are spread over
    # Passes in a row that may spread a relation's rows again without any task running a
    # round (its keys met in one task again, or a key alone is more than a task may know).
    IDLE_PASSES = 3

    def __init__(self, evaluator: Host) -> None:
        self.ev = evaluator
        stable = {n: j for s in evaluator.plan.strata for n, j in s.stable}
        self._stable = {n for n, j in stable.items() if j is not None}
        self._spread = {n: self._spread_on(n, j) for n, j in stable.items()}
        self._covers: dict[str, Column] = {}  # a relation's anti-join condition, once needed
        self._left: dict[int, list[str]] = {}  # scratch folders per stratum (see `release`)

    def evaluate(
        self, stratum: StratumPlan, epoch: Epoch, seeds: Mapping[str, DataFrame | None]
    ) -> tuple[dict[str, DataFrame], dict[str, int], int]:
        """The recursive ``stratum`` of ``epoch`` to its fixpoint, from its ``seeds``: its
        relations' versions to store (none for those the rounds' tasks stored themselves),
        the rows those tasks stored, and how many rounds ran."""
        names = list(stratum.relations)
        current = {n: self.ev.empty(n) if s is None else s for n, s in seeds.items()}
        below = stratum.reads - set(names)
        fix = _Fixpoint({b: self.ev.state(b, epoch).localCheckpoint(eager=True) for b in below})
        self._left[stratum.index] = fix.scratch
        for n in names:
            self.ev.hold(epoch, n, current[n])
        rounds = _SparkRounds(self, fix, stratum, epoch, current)
        ran = interpreter.fixpoint(rounds, stratum, self.ev.budgets_for(epoch))
        rows: dict[str, DataFrame] = dict(rounds.done or {})
        if not rows and not fix.written:
            rows = {n: self.ev.dedupe(n, current[n]) for n in names}
        return rows, fix.written, ran

    def _round(
        self,
        fix: _Fixpoint,
        rules: list[RulePlan],
        epoch: Epoch,
        names: list[str],
        current: dict[str, DataFrame],
        delta: dict[str, DataFrame] | None,
    ) -> dict[str, DataFrame] | None:
        """One semi-naive round (one Spark job); returns the new versions, or None.

        A recursive relation so far is a union of stored pieces (the seeds, then each
        round's new versions), all hash-partitioned the same way (see ``_spread_on``) and
        sorted on the version key. The round's de-duplication shuffles at most what the
        round made; the anti-joins against the pieces then need no shuffle and no sort of
        them, and neither does the union. Versions of one event may repeat across pieces
        until the stratum's write."""
        made: dict[str, list[DataFrame]] = {n: [] for n in names}
        for rule in rules:
            for i in interpreter.variants(rule, delta):
                source = None if i is None or delta is None else {i: delta[rule.scans[i].relation]}
                made[rule.relation].append(self.ev.derive(rule, epoch, source, fix.held))
        new: dict[str, DataFrame] = {}
        for n in names:
            if not made[n]:
                continue
            if self.ev.schemas[n].provenance:
                grown = self._merged(fix, n, reduce(DataFrame.unionByName, made[n]), current)
                if grown is not None:
                    new[n] = grown
                    self.ev.hold(epoch, n, current[n])
                continue
            if n not in fix.pieces:  # the seeds, laid out like the pieces to come
                seeds, had = self._counted_piece(fix, n, current[n])
                fix.pieces[n] = []
                fix.rows[n] = had
                if had:
                    self._keep(fix, n, seeds)
            spread = self._spread[n]
            made_n = reduce(DataFrame.unionByName, made[n]).repartition(self.ev.partitions, *spread)
            fresh = self.ev.dedupe(n, made_n)  # Spark drops the repartition where rows already are
            for _, seen in fix.pieces[n]:
                if n not in self._covers:  # built once Spark runs (see `SparkEvaluator.on_spark`)
                    self._covers[n] = self._covering(n)
                fresh = fresh.join(seen, on=self._covers[n], how="left_anti")
            fresh, counted = self._counted_piece(fix, n, fresh)
            if not counted:
                continue
            new[n] = fresh
            self._keep(fix, n, fresh)
            fix.rows[n] = fix.rows.get(n, 0) + counted
            # One column order (see `_piece`): the union goes by position.
            current[n] = reduce(DataFrame.union, [rows for rows, _ in fix.pieces[n]])
            most = 2 if fix.rows[n] <= self.SMALL_ROWS else self.PIECES
            if len(fix.pieces[n]) >= most:  # keep plans short: one piece again
                current[n] = self._piece(fix, n, current[n])
                fix.pieces[n] = []
                self._keep(fix, n, current[n])
            self.ev.hold(epoch, n, current[n])
        return new or None

    def _merged(
        self, fix: _Fixpoint, name: str, made: DataFrame, current: dict[str, DataFrame]
    ) -> DataFrame | None:
        """A provenance carrier's round: its versions so far and the round's merged into one
        stored piece, one version per key (`SparkEvaluator.dedupe`: the longest life, the
        union of provenance), which becomes ``current[name]``; the versions that grew (new,
        longer-living or resting on more events) are the round's new versions, or None.
        Merging as it goes is what makes a carrier's rounds end: each version's provenance
        only grows, and a version is new only while it does (two stored jobs a round)."""
        before = current[name]
        merged = self._piece(fix, name, self.ev.dedupe(name, before.unionByName(made)))
        same = [*self.ev.version_key(name), "exp", PROV]
        grown, counted = self._counted_piece(
            fix, name, merged.join(before.select(*same), on=same, how="left_anti")
        )
        current[name] = merged
        return grown if counted else None

    def _rounds_in_tasks(
        self,
        fix: _Fixpoint,
        plan: linear_rounds.LinearPlan,
        epoch: Epoch,
        current: dict[str, DataFrame],
        delta: dict[str, DataFrame],
    ) -> tuple[dict[str, DataFrame] | None, dict[str, DataFrame] | None, int]:
        """The rounds after the first in Spark jobs, each partition of the relation taken to
        its fixpoint by a task (see `linear_fixpoint`): spread on its stable argument, or all in
        one partition when it has none. Returns what Spark's rounds still have to join (None:
        nothing), the relation's versions when that is nothing (one per version key; None
        when the tasks stored them, see `_tasks_write`), and the rounds the tasks ran. Lower
        relations too large to ship leave every round to Spark. Rounds run inside tasks while
        a task knows at most `Policy.task_rows` versions, and only when the lower relations
        they join have at most `Policy.lower_rows` rows each: all are shipped with every task.

        A relation spread on its stable argument that outgrows its tasks is spread again over
        more of them (`_more_tasks`), each going on from what the last knew, until its rounds
        end or spreading it further stops helping; then Spark's rounds go on from there."""
        name = plan.relation
        lower_rows = self.ev.policy.lower_rows
        lower: dict[str, pa.Table] = {}
        for r in sorted(plan.lower):
            table = fix.held[r].limit(lower_rows + 1).toArrow()
            if table.num_rows > lower_rows:
                return delta, None, 0
            lower[r] = table
        pieces = [rows for rows, _ in fix.pieces[name]]
        rows = reduce(
            DataFrame.union,
            [
                p.withColumn(linear_fixpoint.NEW, F.lit(i == len(pieces) - 1))
                for i, p in enumerate(pieces)
            ],
        )
        tasks = self.ev.partitions if name in self._stable else 1
        rounds = self.ev.policy.budgets.rounds - 1  # the first ran already
        columns = [*R.row_columns(self.ev.schemas[name]), linear_fixpoint.NEW]
        finished: list[DataFrame] = []  # versions of keys whose rounds have ended
        ran = pending = 0
        idle = 0  # passes in a row that spread the rows again and changed nothing
        while True:
            before = pending
            out, pending, busy, depth = self._tasks_pass(
                fix, plan, epoch, lower, rows, tasks, rounds, len(finished)
            )
            ran = max(ran, depth)
            if out is None:  # the tasks stored the epoch
                return None, None, ran
            # A task that ran no round hands back what it was given: as many waiting.
            idle = idle + 1 if finished and pending == before else 0
            wider = self._more_tasks(name, busy) if pending and depth < rounds else 0
            if not wider or idle >= self.IDLE_PASSES:
                break  # done; nothing to spread on; or spreading again does not help
            # A key's versions come only from its own (the argument is stable): the keys
            # none of whose versions waits are done, and the rest go on in more tasks, with
            # the rounds that led to them.
            spread = self._spread[name]
            waiting = out.filter(F.col(linear_fixpoint.NEW)).select(*spread).distinct()
            if busy == 1 and waiting.limit(2).count() < 2:
                break  # one key waits: no spreading splits it
            finished.append(out.join(waiting, on=spread, how="left_anti").select(*columns))
            going = out.join(waiting, on=spread, how="left_semi")
            rows, tasks = going.select(*columns, linear_fixpoint.ROUNDS), wider
        if finished:
            out = reduce(DataFrame.union, [*finished, out.select(*columns)])
        return self._from_tasks(fix, epoch, current, {name: out}, {name: pending}, ran)

    def _more_tasks(self, name: str, busy: int) -> int:
        """How many tasks the rounds of ``name`` go on in once ``busy`` tasks stopped with
        versions still to join (each knowing more than `Policy.task_rows`): four for each,
        so that each knows about a quarter of that to begin with (at most `MOST_TASKS`); 0
        when the relation cannot be spread (it has no stable argument)."""
        return min(self.MOST_TASKS, 4 * max(1, busy)) if name in self._stable else 0

    def _tasks_pass(
        self,
        fix: _Fixpoint,
        plan: linear_rounds.LinearPlan,
        epoch: Epoch,
        lower: Mapping[str, pa.Table],
        rows: DataFrame,
        tasks: int,
        rounds: int,
        again: int,
    ) -> tuple[DataFrame | None, int, int, int]:
        """One Spark job whose ``tasks`` tasks take ``rows`` (the relation's versions and
        ``__new``) to their fixpoint, at most ``rounds`` rounds: the first pass over them,
        whose tasks may write the epoch themselves (`_tasks_write`), or the ``again``-th
        over the keys still to join, laid out anew (keys that met in a task may not meet
        again), which carry the rounds that led to them. Returns the versions the tasks
        know, with ``__new`` and ``__rounds`` (None when the tasks stored the epoch, all
        rounds done), how many wait to be joined, how many tasks stopped with some
        waiting (where the rows may be spread again, else 0), and the most rounds that led
        to a version."""
        name = plan.relation
        if name in self._stable:
            salt = [F.lit(again)] if again else []
            rows = rows.repartition(tasks, *[F.col(c) for c in self._spread[name]], *salt)
        else:
            rows = rows.repartition(1)
        struct = StructType(
            [
                *self.ev.structs[name].fields,
                StructField(linear_fixpoint.NEW, BooleanType()),
                StructField(linear_fixpoint.ROUNDS, LongType()),
            ]
        )
        arrow = to_arrow_schema(struct)
        staging = None if again else self._tasks_write(name, epoch)
        task_rows = self.ev.policy.task_rows
        run = linear_fixpoint.task(
            plan, lower, arrow, epoch.lower, epoch.end, task_rows, staging, rounds
        )
        if staging is None:
            out, seen = self._observed(
                f"rounds-{name}",
                rows.mapInArrow(run, struct),
                F.count_if(F.col(linear_fixpoint.NEW)).alias("waiting"),
                F.max(linear_fixpoint.ROUNDS).alias("rounds"),
            )
            ran, pending = int(seen.get("rounds") or 0), int(seen.get("waiting") or 0)
            busy = 0
            # The tasks left with versions to join (the stored rows keep their parts): a job
            # only where the rows may be spread again.
            if pending and name in self._stable and ran < rounds:
                waiting = out.filter(F.col(linear_fixpoint.NEW))
                busy = waiting.select(F.spark_partition_id()).distinct().count()
            return out, pending, busy, ran
        try:
            summary = rows.mapInArrow(run, from_arrow_schema(linear_fixpoint.SUMMARY)).collect()
        except BaseException:
            self.ev.wh.discard(staging)
            raise
        ran = max((r["rounds"] for r in summary), default=0)
        pending = sum(r["waiting"] for r in summary)
        if not pending:
            self.ev.wh.promote(staging, name, epoch_key(epoch))
            fix.written[name] = sum(r["rows"] for r in summary)
            return None, 0, 0, ran
        # The tasks' files, in memory again (files without ``__new`` hold no waiting row).
        read = self.ev.spark.read.schema(struct).parquet(staging)
        out = read.withColumn(
            linear_fixpoint.NEW, F.coalesce(F.col(linear_fixpoint.NEW), F.lit(False))
        ).withColumn(linear_fixpoint.ROUNDS, F.lit(ran))  # files hold no rounds: the most
        out = bounded(out.localCheckpoint(eager=True))
        self.ev.wh.discard(staging)
        return out, pending, sum(1 for r in summary if r["waiting"]), ran

    def _from_tasks(
        self,
        fix: _Fixpoint,
        epoch: Epoch,
        current: dict[str, DataFrame],
        outs: Mapping[str, DataFrame],
        waiting: Mapping[str, int],
        ran: int,
    ) -> tuple[dict[str, DataFrame] | None, dict[str, DataFrame] | None, int]:
        """What Spark's rounds do with the rows the rounds in tasks returned (``outs``, per
        relation: the stored columns and ``__new``; ``waiting``: how many are new): nothing
        when none waits to be joined (the rows are the relations' versions); else they go on
        from them, the waiting ones their delta."""
        stored = {n: out.select(*R.row_columns(self.ev.schemas[n])) for n, out in outs.items()}
        if not any(waiting.values()):
            return None, stored, ran
        # A task reached its limit: Spark's rounds go on from what the tasks know.
        delta: dict[str, DataFrame] = {}
        for name, out in outs.items():
            piece = self._piece(fix, name, stored[name])
            fix.pieces[name] = []
            fix.rows[name] = self.ev.policy.task_rows  # at least what a task may know: not small
            self._keep(fix, name, piece)
            current[name] = piece
            self.ev.hold(epoch, name, piece)
            if waiting.get(name):
                delta[name] = out.filter(F.col(linear_fixpoint.NEW)).select(
                    *R.row_columns(self.ev.schemas[name])
                )
        return delta, None, ran

    def in_one_task(self, stratum: StratumPlan) -> bool:
        """Whether the rounds of ``stratum`` after its first may run in one Spark task
        (`task_rounds`): a recursion that is not linear (those have `linear_fixpoint`),
        whose rules this project's executor works out (no aggregate, no choice), where
        Spark's tasks import the project (local mode, or executors that have this version
        of it installed: `executors.have_project`)."""
        return (
            stratum.linear is None
            and self.ev.policy.task_rows > 0
            and local_stratum.supported(self.ev.plan, stratum)
            and not any(r.aggregate or r.body_aggregates or r.choices for r in stratum.rules)
            and self.ev.tasks_have_project()
        )

    def _rounds_in_one_task(
        self,
        fix: _Fixpoint,
        stratum: StratumPlan,
        epoch: Epoch,
        current: dict[str, DataFrame],
        delta: dict[str, DataFrame],
    ) -> tuple[dict[str, DataFrame] | None, dict[str, DataFrame] | None, int]:
        """The rounds after the first in one Spark task (see `task_rounds`), from the
        relations' versions so far, the first round's new ones and their earlier epochs';
        the lower relations they read are shipped with the task (those of more than
        `Policy.lower_rows` rows leave every round to Spark). The relations travel in one
        table, a relation's columns null in another's rows (`task_rounds.column`). Returns
        as `_rounds_in_tasks`."""
        names = list(stratum.relations)
        policy = self.ev.policy
        lower: dict[str, pa.Table] = {}
        for r in sorted(stratum.reads - set(names)):
            table = fix.held[r].limit(policy.lower_rows + 1).toArrow()
            if table.num_rows > policy.lower_rows:
                return delta, None, 0
            lower[r] = table
        fields = [
            StructField(task_rounds.column(i, f.name), f.dataType)
            for i, n in enumerate(names)
            for f in self.ev.structs[n].fields
        ]
        parts = []
        for i, n in enumerate(names):
            mine = {task_rounds.column(i, f.name): f.name for f in self.ev.structs[n].fields}
            kinds = [
                (current[n], task_rounds.KNOWN),
                (self.ev.history(n, epoch), task_rounds.EARLIER),
            ]
            if n in delta:
                kinds.append((delta[n], task_rounds.WAITING))
            for df, kind in kinds:
                cells = [
                    F.col(mine[f.name]).alias(f.name)
                    if f.name in mine
                    else F.lit(None).cast(f.dataType).alias(f.name)
                    for f in fields
                ]
                parts.append(
                    df.select(
                        F.lit(i).cast(LongType()).alias(task_rounds.RELATION),
                        F.lit(kind).cast(LongType()).alias(task_rounds.KIND),
                        *cells,
                    )
                )
        rows = reduce(DataFrame.union, parts).repartition(1)
        struct = StructType(
            [
                StructField(task_rounds.RELATION, LongType()),
                *fields,
                StructField(linear_fixpoint.NEW, BooleanType()),
                StructField(linear_fixpoint.ROUNDS, LongType()),
            ]
        )
        budgets = self.ev.budgets_for(epoch)
        run = task_rounds.task(
            stratum,
            {n: self.ev.schemas[n] for n in names},
            lower,
            to_arrow_schema(struct),
            (epoch.lower, epoch.end),
            min(policy.local_matches, budgets.combinations),
            min(policy.task_rows, budgets.versions),
            budgets.rounds - 1,  # the first ran already
            budgets,
        )
        of = F.col(task_rounds.RELATION)
        new = F.col(linear_fixpoint.NEW)
        out, seen = self._observed(
            f"rounds-{'-'.join(names)}",
            rows.mapInArrow(run, struct),
            F.max(linear_fixpoint.ROUNDS).alias("rounds"),
            *[F.count_if(new & (of == i)).alias(f"waiting{i}") for i in range(len(names))],
        )
        outs = {
            n: out.filter(of == i).select(
                *[
                    F.col(task_rounds.column(i, f.name)).alias(f.name)
                    for f in self.ev.structs[n].fields
                ],
                new,
            )
            for i, n in enumerate(names)
        }
        waiting = {n: int(seen.get(f"waiting{i}") or 0) for i, n in enumerate(names)}
        return self._from_tasks(fix, epoch, current, outs, waiting, int(seen.get("rounds") or 0))

    def _tasks_write(self, name: str, epoch: Epoch) -> str | None:
        """A staging folder for the rounds' tasks to write the relation's epoch into, when
        they can: Spark runs in this process's machine (local mode, not Connect), the
        warehouse is on its file system, every version belongs to the epoch (none is
        deferred) and the epoch is one partition (not a range, whose versions are split by
        time). Otherwise None: the tasks' rows go through Spark as usual."""
        if not self.ev.local_spark() or name in self.ev.defers or self.ev.is_range(epoch):
            return None
        return self.ev.wh.staging(name)

    def _observed(
        self, name: str, rows: DataFrame, *metrics: Column
    ) -> tuple[DataFrame, dict[str, object]]:
        """``rows`` stored in memory (one Spark job), with ``metrics`` over them worked out by
        the same job, except under Spark Connect, whose checkpoints report no observed metrics
        (a second job there)."""
        if is_connect(self.ev.spark):
            stored = rows.localCheckpoint(eager=True)
            return stored, stored.agg(*metrics).first().asDict()
        seen = Observation(name)
        stored = bounded(rows.observe(seen, *metrics).localCheckpoint(eager=True))
        return stored, dict(seen.get)

    def _piece(self, fix: _Fixpoint, name: str, rows: DataFrame) -> DataFrame:
        """``rows`` stored (one Spark job) laid out as :meth:`_laid_out` says (under Connect,
        in files: see :meth:`_through_files`)."""
        if is_connect(self.ev.spark):
            return self._through_files(fix, name, rows)
        return bounded(self._laid_out(name, rows).localCheckpoint(eager=True))

    def _counted_piece(self, fix: _Fixpoint, name: str, rows: DataFrame) -> tuple[DataFrame, int]:
        """:meth:`_piece`, and how many rows it holds."""
        if is_connect(self.ev.spark):
            piece = self._piece(fix, name, rows)
            return piece, piece.count()  # the files' rows: no observed metrics under Connect
        count = F.count(F.lit(1)).alias("rows")
        piece, seen = self._observed(f"piece-{name}", self._laid_out(name, rows), count)
        return piece, int(seen.get("rows") or 0)

    def _through_files(self, fix: _Fixpoint, name: str, rows: DataFrame) -> DataFrame:
        """``rows`` written to the warehouse's scratch folder and read back (one Spark
        job), under Spark Connect: its checkpoints keep the size estimate of the plan they
        came from, out of reach of `estimates.bounded`, and a self-join's squares itself
        every round (thirty single-row rounds planned for minutes); a file's estimate is
        its size. Files keep no layout, so none is made (a round's anti-joins shuffle
        them); only the stored column order, for the pieces' union. Removed by
        `release`."""
        path = self.ev.wh.scratch(f"round-{name}")
        fix.scratch.append(path)
        rows = rows.select(*R.row_columns(self.ev.schemas[name]))
        rows.write.parquet(path)
        return self.ev.spark.read.schema(rows.schema).parquet(path)

    def release(self, stratum: StratumPlan) -> None:
        """Remove the files ``stratum``'s rounds left (see `_through_files`), once what it
        derived is stored."""
        for path in self._left.pop(stratum.index, []):
            self.ev.wh.delete(path)

    def _laid_out(self, name: str, rows: DataFrame) -> DataFrame:
        """``rows`` hash-partitioned on the relation's spread and sorted on its version key.
        The explicit repartition costs nothing where the rows are already so partitioned, and
        lets a stored piece carry that partitioning in terms of its own columns, which later
        joins rely on. Pieces have the stored column order, so their union goes by position."""
        rows = rows.select(*R.row_columns(self.ev.schemas[name]))
        rows = rows.repartition(self.ev.partitions, *self._spread[name])
        return rows.sortWithinPartitions(*self.ev.version_key(name))

    def _spread_on(self, name: str, j: int | None) -> list[str]:
        """The columns a recursive relation's pieces are hash-partitioned on: its stable
        argument ``j`` when it has one (then a round with broadcast partners shuffles
        nothing), else its whole version key."""
        return [self.ev.schemas[name].columns[j]] if j is not None else self.ev.version_key(name)

    def _keep(self, fix: _Fixpoint, name: str, piece: DataFrame) -> None:
        """Add a stored piece to ``name``'s relation so far, with its version key renamed for
        the anti-joins (see :meth:`_covering`) that find which later rows are new."""
        seen = piece.select(
            *[F.col(c).alias(f"__k_{c}") for c in self.ev.version_key(name)],
            F.col("exp").alias("__k_exp"),
        )
        # Both sides are partitioned and sorted alike: a merge needs no shuffle, where a
        # broadcast of each small piece would cost a Spark job every round.
        fix.pieces[name].append((piece, seen.hint("merge")))

    def _covering(self, name: str) -> Column:
        """A row is not new when a kept version covers it: same arguments, ``t`` and ``kt``,
        living at least as long."""
        same = [F.col(c) == F.col(f"__k_{c}") for c in self.ev.version_key(name)]
        return reduce(lambda x, y: x & y, same, F.col("__k_exp") >= F.col("exp"))


class _SparkRounds:
    """A recursive stratum's rounds on Spark's plans (`interpreter.Rounds`), the later rounds
    in Spark's tasks while they can: a linear one's in a task per part (`_rounds_in_tasks`),
    another's in one task (`_rounds_in_one_task`)."""

    def __init__(
        self,
        host: Recursion,
        fix: _Fixpoint,
        stratum: StratumPlan,
        epoch: Epoch,
        current: dict[str, DataFrame],
    ) -> None:
        self.host, self.fix, self.stratum, self.epoch = host, fix, stratum, epoch
        self.rules, self.names, self.linear = (
            list(stratum.rules),
            list(stratum.relations),
            stratum.linear,
        )
        self.current = current
        self.done: dict[str, DataFrame] | None = None  # the relation's versions, from the tasks

    def round(self, delta: dict[str, DataFrame] | None) -> dict[str, DataFrame] | None:
        return self.host._round(self.fix, self.rules, self.epoch, self.names, self.current, delta)

    def after_first(
        self, delta: dict[str, DataFrame], ran: int
    ) -> tuple[dict[str, DataFrame] | None, int]:
        if self.host.ev.policy.task_rows <= 0:
            return delta, 0
        if self.linear is not None:
            left, done, more = self.host._rounds_in_tasks(
                self.fix, self.linear, self.epoch, self.current, delta
            )
        elif self.host.in_one_task(self.stratum):
            left, done, more = self.host._rounds_in_one_task(
                self.fix, self.stratum, self.epoch, self.current, delta
            )
        else:
            return delta, 0
        if done is not None:
            self.done = done
        return left, more

    def known(self) -> int:
        return sum(self.fix.rows.values()) + sum(self.fix.written.values())
