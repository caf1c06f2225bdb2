"""The strata of an epoch this process works out itself, with the local executor.

A small epoch's Spark jobs, plans and their analysis cost far more than its rows, and a
recursion's rounds over few rows a job and a plan each. Such strata go to the local
executor (`engine.local.stratum`) over what this process reads of the warehouse
(`ProcessReads`), and their versions are stored where Spark's plans would store them,
for the epoch's later strata and the epochs after it to read. This module decides which
(`takes`, `few_and_small`) and feeds the executor; `SparkEvaluator` does the rest.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from dagster_pomo.engine.budgets import Budgets
from dagster_pomo.engine.local import rule_columns as R
from dagster_pomo.engine.local import stratum as local
from dagster_pomo.engine.local.arrow_schemas import arrow_schema
from dagster_pomo.engine.local.column_joins import (
    Cols,
    TooLarge,
    concat,
    from_arrow,
    height,
    take,
    to_arrow,
)
from dagster_pomo.engine.spark import frames
from dagster_pomo.engine.spark.process_reads import ProcessReads
from dagster_pomo.engine.stats import StratumStats
from dagster_pomo.engine.versions import record
from dagster_pomo.errors import UsageError
from dagster_pomo.lang.check import CLOCK
from dagster_pomo.plan.corpus import StratumPlan
from dagster_pomo.timeline import Epoch, epoch_key, epoch_slot, show_epoch

if TYPE_CHECKING:
    from dagster_pomo.engine.spark.evaluator import SparkEvaluator


class LocalOnly(UsageError):
    """A run told to do without Spark (`Policy.local_only`) met what only Spark works out."""


class LocalStrata:
    """Which strata of which epochs this process works out, and working them out, for one
    `SparkEvaluator` (``ev``: its warehouse, policy, plan and epochs' state)."""

    def __init__(self, ev: SparkEvaluator) -> None:
        self.ev = ev
        self._supported: dict[int, bool] = {}  # which strata it can work out, by index
        # The fewest input events of an epoch in which a stratum's joins grew too large here
        # (`TooLarge`): epochs as large go to Spark at once (see `takes`).
        self._too_large: dict[int, int] = {}
        files = ev.store.local
        self.reads = ProcessReads(ev.wh, ev.schemas, ev.structs, files, ev.policy.lower_rows)
        self._reads_for: tuple[int, int] | None = None  # the epoch (or range) read for last

    def new_scope(self) -> None:
        """An epoch's evaluation begins: what was read through Spark is read anew."""
        self._reads_for = None

    # ------------------------------------------------------------------ which

    def supported(self, stratum: StratumPlan) -> bool:
        """Whether this process can work ``stratum`` out (`local.stratum.supported`; with
        ``@next`` rules when it works them out too: `Policy.local_only`)."""
        if stratum.index not in self._supported:
            alone = self.ev.policy.local_only
            self._supported[stratum.index] = local.supported(self.ev.plan, stratum, alone)
        return self._supported[stratum.index]

    def require(self, strata: Sequence[StratumPlan]) -> None:
        """With `Policy.local_only`, `LocalOnly` naming the first of ``strata`` this process
        cannot work out, and why."""
        for stratum in strata:
            why = local.unsupported(self.ev.plan, stratum, alone=True)
            if why is not None:
                names = ", ".join(stratum.relations)
                raise LocalOnly(
                    f"`{names}` cannot be worked out without Spark: {why}; "
                    "run it with --engine auto (the default) or spark"
                )

    def few_and_small(self, epochs: Sequence[Epoch], strata: Sequence[StratumPlan]) -> bool:
        """Whether this process works ``strata`` out epoch by epoch sooner than Spark takes
        ``epochs`` in one pass: each stratum is one it works out (see `takes`), there
        are at most ``Policy.in_process_epochs`` epochs, each holding at most
        ``Policy.in_process_inputs`` input events (so that each is worked out here). A pass's
        Spark jobs cost seconds however few its rows, and on two cores a fresh JVM's pass
        costs two to three times this process's time a row, whatever the range's total."""
        store, policy = self.ev.store, self.ev.policy
        if policy.local_only:
            return True  # epoch by epoch, here: nothing goes to Spark
        if not store.local or not 0 < len(epochs) <= policy.in_process_epochs:
            return False
        if policy.in_process_inputs <= 0 or not all(map(self.supported, strata)):
            return False
        bound = policy.in_process_inputs
        return all(store.input_events(epoch_key(e)) <= bound for e in epochs)

    def takes(self, stratum: StratumPlan, epoch: Epoch) -> bool:
        """Whether this process works ``stratum`` of ``epoch`` out instead of Spark. The
        stratum is one `local.stratum.supported` takes (no ``@next``, no provenance).
        Spark and the warehouse on this machine: the epoch is not a range, and is small
        (at most ``Policy.in_process_inputs`` input events, counted from its files),
        or the stratum a recursion over few rows (`_reads_few`). A small epoch's Spark jobs
        cost far more than its rows; a large one's rows repay them, but not a recursion's
        rounds over few rows (a job and a plan each). Elsewhere: a non-linear recursion,
        whose reads then bring at most ``Policy.lower_rows`` rows each (`ProcessReads`)."""
        store, policy = self.ev.store, self.ev.policy
        if policy.local_only:
            if not self.supported(stratum):  # worked out once a stratum (`supported`)
                self.require([stratum])
            return True
        if policy.in_process_inputs <= 0 or not self.supported(stratum):
            return False  # 0: never, not even without inputs
        if not store.local:
            # Spark elsewhere: a non-linear recursion's rounds (a linear one's run in Spark's
            # tasks), its versions read through Spark while few (see `ProcessReads`), for an
            # epoch or a range (the rounds over a range are those of one long epoch).
            return stratum.recursive and stratum.linear is None and policy.lower_rows > 0
        if self.ev.is_range(epoch):
            return False
        inputs = store.input_events(epoch_key(epoch))
        too_large = self._too_large.get(stratum.index)
        if inputs <= policy.in_process_inputs and (too_large is None or inputs < too_large):
            return True
        return stratum.recursive and self._reads_few(stratum, epoch)

    def _reads_few(self, stratum: StratumPlan, epoch: Epoch) -> bool:
        """Whether every relation ``stratum`` reads holds at most ``Policy.lower_rows``
        versions that may take part in ``epoch`` (its own: of earlier epochs), counted from
        the files' footers. A recursion over few rows is worked out here whatever the
        epoch's size: a Spark round costs a job and a plan (about 0.2 s), a round here
        milliseconds, and the rounds here stop (`TooLarge`) when it grows."""
        wh, key, limit = self.ev.wh, epoch_key(epoch), self.ev.policy.lower_rows
        for name in stratum.reads:
            if name == CLOCK:
                continue  # worked out, not read: an epoch's ticks
            keys = self.ev.alive_keys(name, epoch, epoch.start)
            if name not in stratum.relations:
                keys.append(key)
            stored = wh.stored_keys(name)
            if sum(wh.stored_rows(name, k) for k in keys if k in stored) > limit:
                return False
        return True

    # ------------------------------------------------------------------ working out

    def evaluate(
        self, stratum: StratumPlan, epoch: Epoch, carried: Mapping[str, Cols] | None = None
    ) -> StratumStats | None:
        """``stratum`` of ``epoch`` worked out here and stored; None when its joins grew too
        large for this process (`TooLarge`, before anything was stored): Spark's turn, and
        at once for the stratum's epochs as large (see `takes`). ``carried``: the ``@next``
        results this process worked out (`next_results`)."""
        try:
            return self.work_out(stratum, epoch, carried or {})
        except TooLarge as exc:
            if self.ev.policy.local_only:
                raise LocalOnly(
                    f"`{', '.join(stratum.relations)}` of {show_epoch(epoch)} makes {exc}, more "
                    "than the combinations budget lets this process make: raise it (--budget "
                    "combinations=N) or run with --engine auto (the default) or spark"
                ) from None
            inputs = self.ev.store.input_events(epoch_key(epoch))
            index = stratum.index
            self._too_large[index] = min(inputs, self._too_large.get(index, inputs))
            return None

    def work_out(
        self, stratum: StratumPlan, epoch: Epoch, carried: Mapping[str, Cols] | None = None
    ) -> StratumStats:
        """``stratum`` of ``epoch`` worked out by this process, stored as Spark's would be."""
        ev = self.ev
        stats = StratumStats(stratum.index, stratum.relations, rounds=1, in_process=True)
        started = time.perf_counter()
        seeds = {n: self._seeds(n, epoch, (carried or {}).get(n)) for n in stratum.relations}
        budgets = ev.budgets_for(epoch)
        matches, known = self._limits(budgets)
        made, stats.rounds = local.evaluate(
            ev.plan,
            stratum,
            lambda name, earlier=0: self._state(name, epoch, earlier),
            seeds,
            ev.life,
            epoch.lower,
            epoch.end,
            matches,
            lambda name: self._history(name, epoch),
            known,
            budgets,
        )
        self._put(epoch, made, stats)
        for side in stratum.sides:  # stored, but no relation's versions
            stats.rows.pop(side, None)
        stats.seconds = time.perf_counter() - started
        return stats

    def _limits(self, budgets: Budgets) -> tuple[int, int]:
        """How far a stratum may grow here before it goes to Spark (`TooLarge`): the most
        matches a join makes, and the most versions a linear recursion's rounds know; with
        `Policy.local_only` (nowhere to go), the budgets' own."""
        policy = self.ev.policy
        if policy.local_only:
            return budgets.combinations, budgets.versions
        matches = min(policy.local_matches, budgets.combinations)
        return matches, min(policy.task_rows, budgets.versions)

    def _put(self, epoch: Epoch, made: Mapping[str, pa.Table], stats: StratumStats) -> None:
        """Store what a stratum made of ``epoch`` (``made``), counted in ``stats``."""
        ev = self.ev
        key = epoch_key(epoch)
        for name, table in made.items():
            end = epoch.end if name in ev.defers else None
            if not ev.store.local:  # Spark's writer, to wherever the warehouse is
                rows = frames.local_table(ev.spark, table, ev.structs[name])
                stats.rows[name] = ev.store_rows(name, epoch, rows, end)
                continue
            stats.rows[name] = ev.store.put(name, key, table, end)
            if end is not None:
                table = table.filter(pc.less(table["kt"], end))
            self._reads(epoch).keep(name, key, table)
            ev.forget_current(epoch, name)  # Spark's plans read it anew

    # ------------------------------------------------------------------ @next, here

    def next_results(self, epoch: Epoch) -> dict[str, Cols]:
        """The ``@next`` rules over the epoch before ``epoch``, worked out here as
        `SparkEvaluator._next` does on Spark (`Policy.local_only`): their versions per
        relation, one per key, for the strata and `evaluate_next`."""
        ev, prev = self.ev, epoch.previous
        if prev is None:
            return {}
        self.require(ev.plan.inductive)
        budgets = ev.budgets_for(epoch)

        def state(name: str) -> Cols:
            if name == CLOCK:
                return local.ticks(ev.plan, ev.schemas[CLOCK], ev.clock_start, prev.start, prev.end)
            rows = self._history(name, epoch, epoch.start - prev.lower)
            return take(rows, rows["kt"] < prev.end)

        made: dict[str, list[Cols]] = {}
        for stratum in ev.plan.inductive:
            for rule in stratum.rules:
                positives = [state(x.relation) for x in rule.scans]
                negatives = [state(x.relation) for x in rule.negations]
                rows = R.derive_next(rule, positives, negatives, prev, budgets.combinations)
                made.setdefault(rule.relation, []).append(rows)
        return {n: local.versions(ev.schemas[n], parts) for n, parts in made.items()}

    def evaluate_next(self, epoch: Epoch) -> dict[str, Cols]:
        """`next_results`, the relations only ``@next`` rules derive stored as ``epoch``'s
        (with their facts), as `SparkEvaluator.evaluate_next` stores them."""
        ev = self.ev
        carried = self.next_results(epoch)
        stats = StratumStats(-1, ())
        for rel in ev.catalog:
            if rel.inductive and not rel.derived:
                schema = ev.schemas[rel.name]
                seeds = self._seeds(rel.name, epoch, carried.get(rel.name))
                rows = to_arrow(local.versions(schema, [seeds]), arrow_schema(schema))
                self._put(epoch, {rel.name: rows}, stats)
                ev.carried_rows[rel.name] = stats.rows[rel.name]
        return carried

    # ------------------------------------------------------------------ what it reads

    def _reads(self, epoch: Epoch) -> ProcessReads:
        """What this process reads of the warehouse for ``epoch``'s strata (see
        `ProcessReads`), keeping of what it read before the epochs ``epoch`` may read."""
        slot = epoch_slot(epoch)
        if self._reads_for != slot:
            alive: dict[str, set[str]] = {}

            def wanted(name: str, key: str) -> bool:
                if name not in alive:  # with what expires at its start (a body aggregate's)
                    alive[name] = set(self.ev.alive_keys(name, epoch, epoch.start - 1))
                    alive[name].update(self.ev.keys_of(epoch))
                return key in alive[name]

            self.reads.retain(wanted)
            self._reads_for = slot
        return self.reads

    def _state(self, name: str, epoch: Epoch, earlier: int = 0) -> Cols:
        """The versions of ``name`` that can take part in a match with ``tau`` in ``epoch``
        (and those expiring up to ``earlier`` before it), as `SparkEvaluator.state`."""
        ev = self.ev
        if name == CLOCK:
            start = epoch.start - earlier
            return local.ticks(ev.plan, ev.schemas[CLOCK], ev.clock_start, start, epoch.end)
        history = self._history(name, epoch, earlier)
        current = self._reads(epoch).stored(name, ev.keys_of(epoch))
        parts = [p for p in [history, current] if height(p)]
        return concat(parts) if len(parts) > 1 else (parts or [current])[0]

    def _history(self, name: str, epoch: Epoch, earlier: int = 0) -> Cols:
        """The versions of ``name`` from epochs before ``epoch`` still alive in it (or
        ``earlier`` before it)."""
        after = epoch.start - earlier
        return self._reads(epoch).stored(name, self.ev.history_keys(name, epoch, after), after)

    def _seeds(self, name: str, epoch: Epoch, carried: Cols | None = None) -> Cols | None:
        """Facts, events deferred to ``epoch`` and ``carried`` (``@next`` results worked out
        here), as `SparkEvaluator.seeds`."""
        ev = self.ev
        if not ev.store.local:
            seeds = ev.seeds(name, epoch, {})
            return None if seeds is None else self._reads(epoch).fetched(name, seeds)
        schema = arrow_schema(ev.schemas[name])
        parts = []
        facts = ev.facts_in(name, epoch)
        if facts:
            rows = [record(r, ev.schemas[name]) for r in facts]
            parts.append(frames.arrow_table(rows, ev.structs[name]))
        if name in ev.defers:
            stored = ev.wh.stored_keys(name, deferred=True)
            keys = [k for k in ev.keys_before(epoch) if k in stored]
            deferred = ev.wh.read_table(name, keys, schema, True)
            kt = deferred["kt"]
            window = pc.and_(pc.greater_equal(kt, epoch.start), pc.less(kt, epoch.end))
            if (deferred := deferred.filter(window)).num_rows:
                parts.append(deferred)
        if carried is not None and height(carried):
            parts.append(to_arrow(carried, schema))
        if not parts:
            return None
        return from_arrow(pa.concat_tables([p.cast(schema) for p in parts]))
