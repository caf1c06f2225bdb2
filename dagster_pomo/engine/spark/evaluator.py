"""Epoch-by-epoch evaluation on Spark, reading only the history that can still matter.

For epoch ``[a, b)`` a relation's state is its versions from earlier epochs that
are still alive after ``a`` (only the epochs its lifetime can reach are read)
plus the versions this epoch made so far. Each stratum's new versions (those
with ``tau`` in ``[a, b)``) are written to the epoch's partition and read back,
so plans stay short. Recursive strata run semi-naive to their fixpoint (see
`fixpoint`). ``@next`` rules run at the start of an epoch on the state of the one
before.
"""

from __future__ import annotations

import bisect
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark import inheritable_thread_target
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    StringType,
    StructField,
    StructType,
)

from dagster_pomo.engine.budgets import Budgets, over
from dagster_pomo.engine.local.column_joins import TooLarge
from dagster_pomo.engine.policy import DEFAULT, Policy
from dagster_pomo.engine.reach import Records
from dagster_pomo.engine.spark import epoch_versions, executors, frames
from dagster_pomo.engine.spark import rule_frames as R
from dagster_pomo.engine.spark.epoch_jobs import JobCount, counted_jobs, interpreted
from dagster_pomo.engine.spark.epoch_store import EpochStore
from dagster_pomo.engine.spark.fixpoint import Recursion
from dagster_pomo.engine.spark.local_strata import LocalStrata
from dagster_pomo.engine.spark.lookups import remember_lookups
from dagster_pomo.engine.spark.range_pass import RangePass
from dagster_pomo.engine.spark.session import LazySession, runs_here, started
from dagster_pomo.engine.spark.stored_versions import collect_versions, read_versions, struct_of
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.engine.stats import EpochScope, StratumStats
from dagster_pomo.engine.versions import Version, record
from dagster_pomo.lang import Program
from dagster_pomo.lang.check import CLOCK
from dagster_pomo.plan.constant_defs import tick_ranges
from dagster_pomo.plan.corpus import CorpusPlan, StratumPlan
from dagster_pomo.plan.rules import RulePlan
from dagster_pomo.plan.schema import PROV, Schema
from dagster_pomo.plan.time import reach_of, reaches
from dagster_pomo.timeline import NEVER, Epoch, epoch_key, epoch_slot

if TYPE_CHECKING:
    from dagster_pomo.engine.lines import TimeWindow
    from dagster_pomo.engine.stored import StoredLanding


@dataclass
class _EpochCaches:
    """What the epoch under way has read, kept for its strata; new for every epoch."""

    # Its versions so far, by (`epoch_slot`, relation): read once, reused by rules.
    # None: nothing stored.
    current: dict[tuple[tuple[int, int], str], DataFrame | None] = field(default_factory=dict)
    # Earlier epochs' versions, by relation and partitions: rules and strata reading the same
    # history share one scan (resolving a scan's files costs the driver ~10 ms each time).
    history: dict[tuple[str, tuple[str, ...]], DataFrame | None] = field(default_factory=dict)
    read: set[tuple[str, str]] = field(default_factory=set)  # partitions it read


class SparkEvaluator:
    """The Spark backend of the epoch driver (`engine.driver.Driver`): evaluates one stratum
    of one epoch, or of a range standing for several, into a warehouse."""

    TICKS_ALONE = 100_000  # clock ticks an epoch generates in one partition (see `_ticks`)

    def __init__(
        self,
        spark: SparkSession,
        program: Program,
        schemas: Mapping[str, Schema],
        warehouse: Warehouse,
        epochs: list[Epoch],
        clock_start: int,
        plan: CorpusPlan,
        facts: Mapping[str, list[Version]] | None = None,
        policy: Policy = DEFAULT,
    ) -> None:
        """``plan``: the corpus's plan, compiled once by the driver; ``policy``: how it may
        run (see `Policy`)."""
        self.spark = spark
        remember_lookups(spark)  # a session made elsewhere: the engine builds many columns
        self.program = program
        self.catalog = program.catalog
        self.plan = plan
        # and the tables the strata keep besides their relations (`StratumPlan.sides`)
        self.schemas = {**schemas, **self.plan.side_schemas}
        schemas = self.schemas
        self.policy = policy
        self.wh = warehouse
        self.epochs = epochs
        self.clock_start = clock_start
        self.facts = {k: v for k, v in (facts or {}).items() if not self.catalog[k].is_input}
        self.structs = {name: struct_of(s) for name, s in schemas.items()}
        self.life = reaches(self.plan, max((e.end - e.start for e in epochs), default=1))
        self.defers = self.plan.defers
        # Rows the last `evaluate_next` stored, per relation that only `@next` rules derive.
        self.carried_rows: dict[str, int] = {}
        self._epoch = _EpochCaches()  # what the epoch under way has read (see `epoch_scope`)
        self._ends = [e.end for e in epochs]
        shuffle = "spark.sql.shuffle.partitions"
        lazy = isinstance(spark, LazySession)
        self.partitions = int((spark.conf_value(shuffle) if lazy else spark.conf.get(shuffle)) or 2)
        self._nothing: dict[str, DataFrame] = {}  # see `empty`
        self._ranges: dict[tuple[int, int], RangePass] = {}  # ranges evaluated as one (`one_pass`)
        inputs = [r.name for r in self.catalog.inputs]
        self.store = EpochStore(warehouse, inputs, self.local_spark() and warehouse.is_local)
        self.recursion = Recursion(self)
        self.local = LocalStrata(self)  # the strata this process works out itself

    # ------------------------------------------------------------------ set-up

    def _rows_frame(self, name: str, rows: list[Version]) -> DataFrame:
        return frames.local(
            self.spark, [record(r, self.schemas[name]) for r in rows], self.structs[name]
        )

    def key_for(self, t: int) -> str | None:
        """The epoch holding time ``t`` (earlier times go to the first epoch)."""
        if not self.epochs or t >= self.epochs[-1].end:
            return None
        return epoch_key(self.epochs[bisect.bisect_right(self._ends, t)])

    def write_inputs(self, events: Mapping[str, list[Version]], keys: Collection[str] = ()) -> None:
        """Store each input relation's events in the partitions of their epochs, and remove
        the partitions of ``keys`` where it has none. Where Spark runs in this machine and
        the warehouse is on its disk, this process writes each epoch's file itself, with no
        Spark job (a quarter of the time at a million rows); elsewhere one Spark job per
        relation, the rows going to the JVM as Arrow columns."""
        here = self.local_spark() and self.wh.is_local
        for rel in self.catalog.inputs:
            by_key: dict[str, list[Version]] = {}
            for r in events.get(rel.name, []):
                if (key := self.key_for(r.kt)) is not None:
                    by_key.setdefault(key, []).append(r)
            for key in sorted(set(keys) - set(by_key)):
                if self.wh.exists(self.wh.path(rel.name, key)):
                    self.wh.remove(rel.name, key)
            struct, schema = self.structs[rel.name], self.schemas[rel.name]
            if here:
                for key, part in by_key.items():
                    table = frames.arrow_table([record(r, schema) for r in part], struct)
                    self.wh.put(rel.name, key, table)
            elif by_key:
                rows = [(*record(r, schema), key) for key, part in by_key.items() for r in part]
                struct = StructType([*struct.fields, StructField("epoch", StringType())])
                self.wh.write_partitioned(rel.name, frames.local(self.spark, rows, struct), by_key)

    def store_landing(
        self,
        paths: Sequence[Path],
        epochs: Sequence[Epoch],
        window: TimeWindow,
        facts: Mapping[str, list[Version]],
    ) -> StoredLanding:
        """The landing files ``paths`` read by Spark's tasks, the input relations' events
        of ``epochs`` (consecutive, of this evaluator's) stored (see
        `landing.store_landing`)."""
        from dagster_pomo.engine.spark.landing import Grid, store_landing

        first = self.epochs[0]
        grid = Grid(first.end - first.start, first.start)
        chosen = list(epochs)
        at_first = chosen[0] == first
        wh, program = self.wh, self.program
        return store_landing(self.spark, wh, program, paths, grid, chosen, window, facts, at_first)

    def on_spark(self) -> None:
        """Start the session before building Spark plans: PySpark's column functions
        (``F.col``, ``F.lit``) need a running one, and may come before any use of it."""
        if isinstance(self.spark, LazySession):
            self.spark.get()

    def local_spark(self) -> bool:
        """Whether Spark runs in this process's machine (local mode, not Connect)."""
        return runs_here(self.spark)

    def tasks_have_project(self) -> bool:
        """Whether Spark's tasks can run this project's own modules by reference: in local
        mode, or where the executors import this version of it (asked once)."""
        return executors.have_project(self.spark)

    # ------------------------------------------------------------------ state

    def _history(self, name: str, epoch: Epoch, after: int) -> DataFrame:
        """Versions from epochs before ``epoch`` still alive after ``after``."""
        found = self._stored_history(name, epoch, after)
        return self.empty(name) if found is None else found

    def _stored_history(self, name: str, epoch: Epoch, after: int) -> DataFrame | None:
        """:meth:`_history`, or None when no epoch that could hold such versions is stored:
        a plan leaves out what cannot hold a row rather than analyse and optimize it away
        (the first epochs of a run, and relations whose lifetime reaches no stored epoch)."""
        if name == CLOCK:
            return self._ticks(after, epoch.start)
        slot = (name, tuple(self.history_keys(name, epoch, after)))
        if slot not in self._epoch.history:  # not written while this epoch is evaluated
            self._epoch.history[slot] = self.wh.read_stored(name, self.structs[name], slot[1])
        stored = self._epoch.history[slot]
        return None if stored is None else stored.filter(F.col("exp") > after)

    def history_keys(self, name: str, epoch: Epoch, after: int) -> list[str]:
        """The stored epochs before ``epoch`` that may hold versions of ``name`` alive after
        ``after`` (those its lifetime reaches), counted as read by the epoch under way."""
        keys = self.alive_keys(name, epoch, after)
        self._epoch.read.update((name, k) for k in keys)
        return keys

    def alive_keys(self, name: str, epoch: Epoch, after: int) -> list[str]:
        """The epochs before ``epoch`` that ``name``'s lifetime lets hold versions alive after
        ``after``."""
        reach = self.life.get(name, NEVER)
        return [
            epoch_key(e)
            for e in self.epochs
            if e.start < epoch.start and (reach >= NEVER or e.end + reach > after)
        ]

    def _ticks(self, start: int, end: int) -> DataFrame:
        """Clock ticks alive at some instant of ``[start, end)`` (none before the clock start).
        Spark generates them from a range (no rows cross from Python), and knows how few they
        are, so joins broadcast them. A range of up to ``TICKS_ALONE`` ticks is one partition:
        broadcasting it is one task, not one for each of the session's default partitions."""
        offset_col, period_col = self.schemas[CLOCK].columns
        parts = []
        for o, p, first, stop in tick_ranges(self.plan.clocks, self.clock_start, start, end):
            t = (F.lit(o) + F.col("id") * F.lit(p)).cast("long")
            slices = 1 if stop - first <= self.TICKS_ALONE else None
            parts.append(
                self.spark.range(first, stop, numPartitions=slices).select(
                    F.lit(o).cast("long").alias(offset_col),
                    F.lit(p).cast("long").alias(period_col),
                    t.alias("t"),
                    t.alias("kt"),
                    (t + F.lit(p)).alias("exp"),
                    t.alias("_tau"),
                )
            )
        if not parts:
            return frames.empty(self.spark, self.structs[CLOCK])
        return reduce(DataFrame.unionByName, parts)

    def state(
        self,
        name: str,
        epoch: Epoch,
        held: Mapping[str, DataFrame] | None = None,
        earlier: int = 0,
    ) -> DataFrame:
        """All versions of ``name`` that can take part in a match with ``tau`` in the epoch
        (``held``: those a recursive stratum keeps in memory), and those expiring up to
        ``earlier`` before its start."""
        if held and name in held:
            return held[name]
        if name == CLOCK:
            return self._ticks(epoch.start - earlier, epoch.end)
        history = self._stored_history(name, epoch, epoch.start - earlier)
        slot = (epoch_slot(epoch), name)
        if slot not in self._epoch.current:
            self._epoch.current[slot] = self._stored_current(name, epoch)
        parts = [df for df in (history, self._epoch.current[slot]) if df is not None]
        return reduce(DataFrame.unionByName, parts) if parts else self.empty(name)

    def _stored_current(self, name: str, epoch: Epoch) -> DataFrame | None:
        """``epoch``'s versions of ``name`` so far, or None when none is stored."""
        return self.wh.read_stored(name, self.structs[name], self.keys_of(epoch))

    def history(self, name: str, epoch: Epoch) -> DataFrame:
        """Versions of ``name`` from epochs before ``epoch`` still alive in it."""
        return self._history(name, epoch, epoch.start)

    def keys_of(self, epoch: Epoch) -> list[str]:
        """The stored partitions that make up ``epoch``: its own, or a range's."""
        ranged = self._ranges.get(epoch_slot(epoch))
        return ranged.keys if ranged is not None else [epoch_key(epoch)]

    def forget_current(self, epoch: Epoch, name: str) -> None:
        """``epoch``'s versions of ``name`` were stored anew: rules read them again."""
        self._epoch.current.pop((epoch_slot(epoch), name), None)

    def passing(self, plan: str) -> AbstractContextManager[None]:
        """The block of one pass: what it stores records the pass and ``plan``."""
        return epoch_versions.passing(self.wh, plan)

    def stored_versions(self, relations: Iterable[str]) -> Records | None:
        """The records of the stored versions of ``relations``' epochs (`reach.Stored`);
        None where the warehouse keeps none."""
        return epoch_versions.records(self.wh, relations)

    def discard(self, epoch: Epoch, strata: Sequence[StratumPlan]) -> None:
        """Remove what ``strata`` stored of ``epoch``, its deferred events too (see
        `Driver.evaluate_epoch`)."""
        for name in (n for s in strata for n in (*s.relations, *s.sides)):
            for key in self.keys_of(epoch):
                self.wh.remove(name, key, recorded=False)
                self.wh.remove(name, key, deferred=True)
            self.forget_current(epoch, name)

    def hold(self, epoch: Epoch, name: str, rows: DataFrame) -> None:
        """Let the rules of ``epoch`` read ``rows`` as its versions of ``name`` so far (a
        recursive relation's, between rounds) instead of the epoch's stored partition."""
        self._epoch.current[(epoch_slot(epoch), name)] = rows

    # ------------------------------------------------------------------ one epoch

    @contextmanager
    def epoch_scope(self, epoch: Epoch) -> Iterator[EpochScope]:
        """Within this block the strata of ``epoch`` are evaluated: its Spark jobs carry the
        epoch's job group, counted when the block ends, with the partitions it read. The
        epoch's Spark state starts empty (what it read of earlier epochs may have changed);
        what this process read from files stays while the files do (`ProcessReads`)."""
        scope = EpochScope()
        # Earlier epochs' entries are no longer needed, nor what Spark read of them.
        self._epoch = _EpochCaches(read=scope.partitions_read)
        self.local.new_scope()
        group = f"pomo-{self.program.name}-{epoch_key(epoch)}"
        jobs = JobCount()
        try:
            with counted_jobs(self.spark, group, f"epoch {epoch}") as jobs:
                yield scope
        finally:
            scope.spark_jobs = jobs.jobs

    def concurrent(self, task: Callable[..., StratumStats]) -> Callable[..., StratumStats]:
        """``task`` as a thread started now runs it: with this thread's Spark job group."""
        running = started(self.spark)
        # Not started: a thread that starts it puts its jobs in the epoch's group itself.
        return task if running is None else inheritable_thread_target(running)(task)

    @contextmanager
    def plans_for(self, epoch: Epoch, strata: Sequence[StratumPlan]) -> Iterator[bool]:
        """Within this block, where ``strata`` of ``epoch`` are evaluated, run their plans
        `interpreted`, without generated code, when the epoch is small (at most
        ``Policy.interpret_inputs`` input events, counted from its files: Spark and the
        warehouse on this machine) and none of ``strata`` is recursive (rounds can make far
        more rows than the epoch reads). The block is given whether they run so."""
        small = (
            self.store.local
            and not all(self.local.takes(s, epoch) for s in strata)  # no plans to run
            and not any(s.recursive for s in strata)
            and sum(self.store.input_events(k) for k in self.keys_of(epoch))
            <= self.policy.interpret_inputs
        )
        if not small:
            yield False
            return
        with interpreted(self.spark) as plain:
            yield plain

    def evaluate_next(self, epoch: Epoch) -> dict[str, DataFrame]:
        """The ``@next`` rules over the previous epoch. Relations that only ``@next`` rules derive
        are written to this epoch's partition; all results are returned for the strata."""
        if not any(rel.inductive for rel in self.catalog):
            return {}  # no `@next` rule: nothing to carry, and no reason to start Spark
        if self.policy.local_only:
            return self.local.evaluate_next(epoch)  # type: ignore[return-value]
        self.on_spark()
        carried = self._next(epoch) if epoch.previous is not None else {}
        for rel in self.catalog:
            if rel.inductive and not rel.derived:
                rows = carried.get(rel.name)
                facts = self.seeds(rel.name, epoch, {})
                parts = [p for p in (facts, rows) if p is not None]
                rows = reduce(DataFrame.unionByName, parts) if parts else self.empty(rel.name)
                self.carried_rows[rel.name] = self.store_rows(
                    rel.name, epoch, self.dedupe(rel.name, rows)
                )
        return carried

    def store_rows(
        self,
        name: str,
        epoch: Epoch,
        rows: DataFrame,
        end: int | None = None,
        made: Sequence[DataFrame] = (),
    ) -> int:
        """Store ``rows`` as ``epoch`` of ``name`` (see `EpochStore.store`, or `RangePass.store`
        for a range), where the epoch's later strata then read them; how many were stamped
        before ``end``. ``made``: the versions the epoch's rules derived (before merging
        them with the epoch's seeds); a range keeps those stamped after ``end`` per epoch."""
        ranged = self._ranges.get(epoch_slot(epoch))
        if ranged is None:
            stored = self.store.store(name, epoch_key(epoch), rows, end)
        else:
            later = None
            if end is not None and made:
                # As each epoch would have kept them: merged only with its own versions.
                derived = reduce(DataFrame.unionByName, made)
                later = self.dedupe(name, ranged.stamped_later(derived), by=["epoch"])
            stored = ranged.store(self.wh, name, rows, later)
        self._epoch.current[(epoch_slot(epoch), name)] = self._stored_current(name, epoch)
        return stored

    def one_pass(self, epochs: Sequence[Epoch], strata: Sequence[StratumPlan]) -> Epoch | None:
        """One epoch standing for ``epochs`` when ``strata`` can be evaluated over all of them
        at once and store what they would store epoch by epoch (see `spans`): the corpus has
        no ``@next`` rule, no recursive stratum among ``strata`` derives a relation that
        defers events (its rounds do not tell the versions they derive from its seeds, which
        must not be deferred again), the epochs are consecutive and of one length, and
        they are not few and small enough for this process to take sooner one by one (see
        `LocalStrata.few_and_small`). Evaluate ``strata`` over the epoch returned, in order;
        None: epoch by epoch."""
        if not self.policy.one_pass or self.plan.has_next:
            return None
        if any(s.recursive and self.defers & set(s.relations) for s in strata):
            return None
        if self.local.few_and_small(epochs, strata):
            return None
        ranged = RangePass.of(epochs)
        if ranged is None:
            return None
        self._ranges[epoch_slot(ranged.epoch)] = ranged
        return ranged.epoch

    def is_range(self, epoch: Epoch) -> bool:
        """Whether ``epoch`` stands for a range of epochs (see `one_pass`)."""
        return epoch_slot(epoch) in self._ranges

    def evaluate_stratum(
        self, stratum: StratumPlan, epoch: Epoch, carried: Mapping[str, DataFrame] | None = None
    ) -> StratumStats:
        """One deductive stratum of ``epoch``; earlier strata of the epoch must be stored.
        ``carried`` are the ``@next`` results (worked out here when not given)."""
        if carried is None:
            needs_next = any(self.catalog[n].inductive for n in stratum.relations)
            carried = {}
            if needs_next and epoch.previous is not None:
                local = self.policy.local_only
                carried = self.local.next_results(epoch) if local else self._next(epoch)
        return self._stratum(stratum, epoch, carried)

    def seeds(self, name: str, epoch: Epoch, carried: Mapping[str, DataFrame]) -> DataFrame | None:
        """Versions of a derived relation that this epoch gets without deriving them: facts,
        events deferred to it by earlier epochs, and ``@next`` results (None: there are none).
        """
        facts = self.facts_in(name, epoch)
        parts = [self._rows_frame(name, facts)] if facts else []
        if name in self.defers:
            keys = self.keys_before(epoch)
            deferred = self.wh.read_stored(name, self.structs[name], keys, deferred=True)
            if deferred is not None:
                window = (F.col("kt") >= epoch.start) & (F.col("kt") < epoch.end)
                parts.append(deferred.filter(window))
        if name in carried:
            parts.append(carried[name])
        return reduce(DataFrame.unionByName, parts) if parts else None

    def facts_in(self, name: str, epoch: Epoch) -> list[Version]:
        """The corpus's facts of ``name`` that ``epoch`` takes: those known in it (the first
        epoch, or a range starting with it, also those before it)."""
        return [r for r in self.facts.get(name, []) if epoch.lower <= r.kt < epoch.end]

    def keys_before(self, epoch: Epoch) -> list[str]:
        """The stored partitions of the epochs before ``epoch`` (where events deferred to
        it wait)."""
        return [epoch_key(e) for e in self.epochs if e.start < epoch.start]

    def empty(self, name: str) -> DataFrame:
        """No versions of ``name`` (one frame per relation: plans are not free to build)."""
        if name not in self._nothing:
            self._nothing[name] = frames.empty(self.spark, self.structs[name])
        return self._nothing[name]

    def derive(
        self,
        rule: RulePlan,
        epoch: Epoch,
        source: dict[int, DataFrame] | None = None,
        held: Mapping[str, DataFrame] | None = None,
    ) -> DataFrame:
        args = self._rule_sources(rule, epoch, source, held)
        if rule.aggregate is None:
            budgets = self.budgets_for(epoch)
            before = self.chosen_before(rule, epoch)
            try:
                return R.derive(*args, (budgets.combinations, budgets.text), before)
            except TooLarge as exc:
                raise over("combinations", budgets, exc.product, None, rule=rule) from None
        reach = reach_of(self.life, rule.aggregate.reach_from)
        return R.aggregate(*args, R.Buckets.for_epoch(epoch.start, epoch.end, reach))

    def chosen_before(self, rule: RulePlan, epoch: Epoch) -> list[DataFrame]:
        """Per ``choose`` of ``rule``, what the epochs before ``epoch`` chose (its table's
        versions, which never expire)."""
        return [self._history(c.table.name, epoch, epoch.start) for c in rule.choices]

    def first_choices(self, rule: RulePlan, epoch: Epoch) -> dict[str, DataFrame]:
        """What each ``choose`` of ``rule`` chooses in ``epoch`` for keys chosen for the first
        time, by its table's name (`rule_frames.first_choices`)."""
        args = self._rule_sources(rule, epoch)
        made = R.first_choices(*args, self.chosen_before(rule, epoch))
        return {c.table.name: rows for c, rows in zip(rule.choices, made, strict=True)}

    def _rule_sources(
        self,
        rule: RulePlan,
        epoch: Epoch,
        source: dict[int, DataFrame] | None = None,
        held: Mapping[str, DataFrame] | None = None,
    ) -> tuple[RulePlan, list[DataFrame], list[DataFrame], int, int]:
        """What ``rule`` reads in ``epoch``: per scan (``source`` where given), then per body
        aggregate, and per negated atom; and the epoch's bounds."""
        source = source or {}
        # A window also reads what expires at the start: a change (see `rules.aggregate`).
        earlier = int(rule.window)
        positives = [
            source[i] if i in source else self.state(x.relation, epoch, held, earlier)
            for i, x in enumerate(rule.scans)
        ]
        # A body aggregate also reads the versions expiring at the epoch's start: a change.
        positives += [self.state(x.relation, epoch, held, 1) for x in rule.body_aggregates]
        negatives = [self.state(x.relation, epoch, held) for x in rule.negations]
        return (rule, positives, negatives, epoch.lower, epoch.end)

    def budgets_for(self, epoch: Epoch) -> Budgets:
        """The budgets of a pass over ``epoch``: those of `Policy.budgets`, and for a range the
        versions and combinations of all its epochs (a range past them goes epoch by epoch,
        where each epoch's are checked: see `Driver.evaluate_range`)."""
        budgets = self.policy.budgets
        ranged = self._ranges.get(epoch_slot(epoch))
        if ranged is None:
            return budgets
        n = len(ranged.epochs)
        return replace(
            budgets, versions=budgets.versions * n, combinations=budgets.combinations * n
        )

    def version_key(self, name: str) -> list[str]:
        """What tells versions apart: arguments, ``t`` and ``kt``."""
        return [*self.schemas[name].columns, "t", "kt"]

    def dedupe(self, name: str, df: DataFrame, by: Sequence[str] = ()) -> DataFrame:
        """One version per ``(args, t, kt)`` (and value of the columns ``by``, kept): the
        longest-living, or an aggregate's latest."""
        schema = self.schemas[name]
        key = [*self.version_key(name), *by]
        out = [*R.row_columns(schema), *by]
        # A carrier's versions of one key merge their provenance (a union).
        prov = [R.united(PROV).alias(PROV)] if schema.provenance else []
        if schema.aggregates:
            rest = [*schema.aggregate_columns, "exp", "_tau"]
            best = F.max_by(F.struct(*rest), F.col("_tau")).alias("__best")
            return (
                df.groupBy(*key)
                .agg(best, *prov)
                .select(*key, *[f"__best.{c}" for c in rest], *([PROV] if prov else []))
                .select(*out)
            )
        return (
            df.groupBy(*key)
            .agg(F.max("exp").alias("exp"), F.min("_tau").alias("_tau"), *prov)
            .select(*out)
        )

    def _stratum(
        self, stratum: StratumPlan, epoch: Epoch, carried: Mapping[str, DataFrame]
    ) -> StratumStats:
        try:
            stats = self._stratum_within(stratum, epoch, carried)
        except Exception as exc:  # a task's text too long comes back as Spark's error
            rule = _too_long(stratum, str(exc))
            if rule is None:
                raise
            raise over("text", self.policy.budgets, None, stratum, rule=rule) from None
        versions = sum(stats.rows.values())
        budgets = self.budgets_for(epoch)
        if versions > budgets.versions:
            raise over("versions", budgets, versions, stratum)
        return stats

    def _stratum_within(
        self, stratum: StratumPlan, epoch: Epoch, carried: Mapping[str, DataFrame]
    ) -> StratumStats:
        if self.local.takes(stratum, epoch):
            # ``carried`` is this process's own only when it works everything out here
            done = self.local.evaluate(stratum, epoch, carried if self.policy.local_only else None)
            if done is not None:
                return done  # else too large for this process: Spark's turn
        self.on_spark()
        stats = StratumStats(stratum.index, stratum.relations)
        started = time.perf_counter()
        names = list(stratum.relations)
        seeds = {n: self.seeds(n, epoch, carried) for n in names}
        rows: dict[str, DataFrame] = {}
        made_here: dict[str, list[DataFrame]] = {}  # what the rules derive, see `_store`
        cached: list[DataFrame] = []
        written: dict[str, int] = {}
        sides: dict[str, DataFrame] = {}  # what its `choose`s chose (`StratumPlan.sides`)
        if stratum.recursive:
            rows, written, stats.rounds = self.recursion.evaluate(stratum, epoch, seeds)
        else:
            stats.rounds = 1
            for r in stratum.rules:
                sides.update(self.first_choices(r, epoch))
            for n in names:
                own = stratum.own(n)
                made = [self.derive(r, epoch) for r in own]
                if made and n in self.defers and self.is_range(epoch):
                    # A range writes them twice, to its partitions and to each epoch's
                    # deferred events: worked out once.
                    made = [reduce(DataFrame.unionByName, made).cache()]
                    cached += made
                made_here[n] = made
                if seeds[n] is None and stratum.one_aggregate(n):
                    # One aggregate rule alone makes one version per (group, tau): nothing
                    # to merge, and no shuffle to merge it.
                    rows[n] = made[0].select(*R.row_columns(self.schemas[n]))
                    continue
                parts = [p for p in (seeds[n], *made) if p is not None]
                merged = reduce(DataFrame.unionByName, parts) if parts else self.empty(n)
                rows[n] = self.dedupe(n, merged)
        try:
            for side, chosen in sides.items():
                self.store_rows(side, epoch, chosen)
            for n in names:
                if n in written:
                    stats.rows[n] = written[n]
                    self.hold(epoch, n, self.wh.read(n, self.structs[n], [epoch_key(epoch)]))
                else:
                    end = epoch.end if n in self.defers else None
                    stats.rows[n] = self.store_rows(n, epoch, rows[n], end, made_here.get(n, ()))
        finally:
            for frame in cached:
                frame.unpersist()
            if stratum.recursive:
                self.recursion.release(stratum)
        stats.seconds = time.perf_counter() - started
        return stats

    def _next(self, epoch: Epoch) -> dict[str, DataFrame]:
        """``@next`` rules over the previous epoch; stamped at its end, alive one more epoch."""
        prev = epoch.previous
        assert prev is not None
        b = prev.end
        out: dict[str, list[DataFrame]] = {}

        def state(name: str) -> DataFrame:
            if name == CLOCK:
                return self._ticks(prev.start, prev.end)
            return self._history(name, epoch, prev.lower).filter(F.col("kt") < b)

        for stratum in self.plan.inductive:
            for rule in stratum.rules:
                positives = [state(x.relation) for x in rule.scans]
                negatives = [state(x.relation) for x in rule.negations]
                rows = R.derive_next(rule, positives, negatives, prev)
                out.setdefault(rule.relation, []).append(rows)
        return {n: self.dedupe(n, reduce(DataFrame.unionByName, dfs)) for n, dfs in out.items()}

    # ------------------------------------------------------------------ results

    def versions(self, name: str, keys: Sequence[str] | None = None) -> list[Version]:
        """Every stored version of ``name`` (of the epochs ``keys``, default all): read by
        this process when the warehouse is local (no Spark job, and no Spark at all if none
        ran yet: all of them come to this process either way, and the files are read faster
        than a job collects them)."""
        keys = [epoch_key(e) for e in self.epochs] if keys is None else list(keys)
        schema = self.schemas[name]
        if self.store.local:
            return read_versions(self.wh, schema, keys)
        return collect_versions(self.wh.read(name, self.structs[name], keys), schema)


def _too_long(stratum: StratumPlan, said: str) -> RulePlan | None:
    """The rule of ``stratum`` whose tasks failed because a text it computes is longer than
    `Budgets.text` (``said``: Spark's error, carrying `rules.TEXT_BUDGET`), or None."""
    found = re.search(re.escape(R.TEXT_BUDGET) + r"(\d+)", said)
    offset = int(found.group(1)) if found else None
    return next((r for r in stratum.rules if r.span.start == offset), None)
