"""A stratum of one small epoch, worked out in this process.

A small epoch's Spark jobs, plans and their analysis cost far more than its rows: a
water-tank epoch of 10,000 readings waits about a second and a half for seven jobs.
Here the same rules run over numpy columns of the same versions (read from the
warehouse's Parquet files, see ``SparkEvaluator``), with the plans' semantics
(:mod:`dagster_pomo.engine.local.rule_columns`), and the versions come back as Arrow
tables for the warehouse. The later rounds of a linear recursion run on the executor
Spark's tasks run them on (`linear_fixpoint`), here as there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from dagster_pomo.engine import interpreter
from dagster_pomo.engine.budgets import DEFAULT as BUDGETS
from dagster_pomo.engine.budgets import BudgetExceeded, Budgets, over
from dagster_pomo.engine.local import linear_fixpoint, provenance
from dagster_pomo.engine.local import rule_columns as R
from dagster_pomo.engine.local.arrow_schemas import arrow_schema
from dagster_pomo.engine.local.column_joins import (
    Cols,
    TooLarge,
    concat,
    from_arrow,
    height,
    pairs_on,
    take,
    to_arrow,
)
from dagster_pomo.plan.constant_defs import tick_ranges
from dagster_pomo.plan.corpus import CorpusPlan, StratumPlan
from dagster_pomo.plan.linear_rounds import LinearPlan
from dagster_pomo.plan.rules import RulePlan
from dagster_pomo.plan.schema import PROV, Schema
from dagster_pomo.plan.time import reach_of

THREADS = 8  # the most threads a linear recursion's rounds take here
# ... when they start from at least this many versions: each thread pays every round's
# fixed cost, which a small recursion's rounds are made of (W1's closure of a 1,000-node
# cycle: 0.39 s on two threads, 0.21 s on one; of gnp(2000, 8000): 1.6 s against 1.8 s).
SPREAD_ROWS = 5_000


def supported(plan: CorpusPlan, stratum: StratumPlan, alone: bool = False) -> bool:
    """Whether ``stratum`` can be worked out here (see `unsupported`)."""
    return unsupported(plan, stratum, alone) is None


def unsupported(plan: CorpusPlan, stratum: StratumPlan, alone: bool = False) -> str | None:
    """Why ``stratum`` cannot be worked out here, or None when it can: a rule is not
    :func:`rule_columns.rule_supported`, or
    the corpus has ``@next`` rules and their versions come from Spark's plans. ``alone``:
    this process works out every stratum (``--engine local``), ``@next`` rules too
    (`derive_next`), with no Spark to agree with."""
    if plan.has_next and not alone:
        return "the corpus's `@next` rules run on Spark's plans"
    for rule in stratum.rules:
        if not R.rule_supported(rule):
            return (
                f"the rule at line {rule.span.line} uses what this process does not work "
                "out (an aggregate over text other than its least or greatest, or a value its "
                "head cannot hold)"
            )
    return None


def ticks(plan: CorpusPlan, schema: Schema, clock_start: int, start: int, end: int) -> Cols:
    """Clock ticks alive at some instant of ``[start, end)`` (none before the clock start)."""
    offset_col, period_col = schema.columns
    parts = []
    for o, p, first, stop in tick_ranges(plan.clocks, clock_start, start, end):
        t = o + np.arange(first, stop, dtype=np.int64) * p
        parts.append(
            {
                offset_col: np.full(len(t), o, np.int64),
                period_col: np.full(len(t), p, np.int64),
                "t": t,
                "kt": t,
                "exp": t + p,
                "_tau": t,
            }
        )
    return concat(parts) if parts else empty(schema)


def empty(schema: Schema) -> Cols:
    return from_arrow(arrow_schema(schema).empty_table())


def evaluate(
    plan: CorpusPlan,
    stratum: StratumPlan,
    state: Callable[..., Cols],
    seeds: Mapping[str, Cols | None],
    life: Mapping[str, int],
    a: int,
    b: int,
    limit: int,
    history: Callable[[str], Cols] | None = None,
    budget: int = 0,
    budgets: Budgets = BUDGETS,
) -> tuple[dict[str, pa.Table], int]:
    """The versions of each relation of ``stratum`` made for epoch ``[a, b)``: what its
    rules derive from ``state`` (a relation's versions that can take part) merged with
    ``seeds`` (facts and deferred events), one version per ``(args, t, kt)``; and the rounds
    it took. A recursive stratum reads its own relations' earlier epochs from ``history``;
    a linear one's rounds after the first run on `linear_fixpoint` while its relation holds at
    most ``budget`` versions (0: as other recursions' rounds run).
    Raises `TooLarge` when a join, or a recursive relation, passes ``limit`` rows
    (a linear one: ``budget``), and `BudgetExceeded` past one of ``budgets``."""
    schemas = plan.schemas
    if stratum.recursive:
        assert history is not None
        linear = stratum.linear if budget > 0 else None
        args = (stratum, schemas, state, history, seeds, (a, b), limit, budgets, linear, budget)
        return _LocalRounds(*args).run()
    out: dict[str, pa.Table] = {}
    for name in stratum.relations:
        schema = schemas[name]
        own = stratum.own(name)
        made = []
        for rule in own:
            # A window also reads what expires at the start: a change (see `rules.aggregate`).
            positives = [state(x.relation, int(rule.window)) for x in rule.scans]
            # A body aggregate also reads what expires at the start: a change.
            positives += [state(x.relation, 1) for x in rule.body_aggregates]
            negatives = [state(x.relation) for x in rule.negations]
            if rule.aggregate is not None:
                reach = reach_of(life, rule.aggregate.reach_from)
                args = (positives, negatives, a, b, reach, limit)
                made.append(_within(stratum, rule, budgets, R.aggregate, *args))
            elif rule.choices:
                assert history is not None
                before = [history(c.table.name) for c in rule.choices]
                args = (positives, negatives, a, b, limit, before)
                rows, sides = _within(stratum, rule, budgets, R.derive_choosing, *args)
                made.append(rows)
                for choice, side in zip(rule.choices, sides, strict=True):
                    out[choice.table.name] = to_arrow(side, arrow_schema(choice.table))
            else:
                made.append(
                    _within(stratum, rule, budgets, R.derive, positives, negatives, a, b, limit)
                )
        parts = [p for p in (seeds.get(name), *made) if p is not None]
        if seeds.get(name) is None and stratum.one_aggregate(name):
            rows = made[0]  # one version per (group, tau) already
        elif parts:
            rows = R.dedupe(schema, concat([_stored(schema, p) for p in parts]))
        else:
            rows = empty(schema)
        out[name] = to_arrow(rows, arrow_schema(schema))
    _check_versions(stratum, budgets, sum(t.num_rows for t in out.values()))
    return out, 1


def _within(
    stratum: StratumPlan,
    rule: RulePlan,
    budgets: Budgets,
    make: Callable[..., Any],
    *args: object,
) -> Any:
    """What ``make(rule, *args, limit)`` derives (its versions, or they and more: a tuple
    of which they come first), within ``budgets``: a product of rows sharing no variable
    that would make more combinations than `Budgets.combinations` (the ``limit`` passed
    never exceeds it: see `LocalStrata`), or a computed text longer than `Budgets.text`, is
    `BudgetExceeded`."""
    try:
        made = make(rule, *args)
    except TooLarge as exc:
        if exc.product > budgets.combinations:
            raise over("combinations", budgets, exc.product, stratum, rule=rule) from None
        raise
    rows = made[0] if isinstance(made, tuple) else made
    for column in rule.computed_text:
        longest = max(map(len, rows[column]), default=0)
        if longest > budgets.text:
            raise over("text", budgets, longest, stratum, rule=rule)
    return made


def _check_versions(stratum: StratumPlan, budgets: Budgets, versions: int) -> None:
    if versions > budgets.versions:
        raise over("versions", budgets, versions, stratum)


class _LocalRounds:
    """A recursive stratum run semi-naive to its fixpoint (`interpreter.fixpoint`) over
    numpy columns (`interpreter.Rounds`): the first round joins every version, each later
    one joins only the previous round's new versions with the rest. A version is new when
    no known version has its ``(args, t, kt)`` and lives as long. A round costs about what
    its new versions cost, not what came before: a thousand single-version rounds take
    seconds (see BENCHMARKS.md). With a ``linear`` plan, the rounds after the first run on
    `linear_fixpoint`. The stratum goes to Spark (`TooLarge`) when a relation grows past
    ``limit`` versions (``budget`` in the linear rounds); `BudgetExceeded` past
    ``budgets``."""

    def __init__(
        self,
        stratum: StratumPlan,
        schemas: Mapping[str, Schema],
        state: Callable[[str], Cols],
        history: Callable[[str], Cols],
        seeds: Mapping[str, Cols | None],
        window: tuple[int, int],
        limit: int,
        budgets: Budgets,
        linear: LinearPlan | None,
        budget: int,
    ) -> None:
        self.stratum, self.schemas, self.state = stratum, schemas, state
        self.window, self.limit, self.budgets = window, limit, budgets
        self.linear, self.budget = linear, budget
        names = stratum.relations
        self.earlier = {n: history(n) for n in names}
        self.versions = {n: versions(schemas[n], [seeds.get(n)]) for n in names}
        self.lower = {x.relation: state(x.relation) for r in stratum.rules for x in r.negations}
        self.finished: dict[str, pa.Table] = {}  # a linear relation's, from `linear_fixpoint`

    def run(self) -> tuple[dict[str, pa.Table], int]:
        """Each relation's versions at the fixpoint, and the rounds it took."""
        ran = interpreter.fixpoint(self, self.stratum, self.budgets)
        out = {
            n: self.finished[n]
            if n in self.finished
            else to_arrow(self.versions[n], arrow_schema(self.schemas[n]))
            for n in self.stratum.relations
        }
        return out, ran

    def _full(self, name: str) -> Cols:
        if name not in self.versions:
            return self.state(name)
        parts = [p for p in (self.earlier[name], self.versions[name]) if height(p)]
        if len(parts) > 1:
            return concat([_stored(self.schemas[name], p) for p in parts])
        return parts[0] if parts else self.versions[name]  # earlier epochs' alone, or none

    def round(self, delta: dict[str, Cols] | None) -> dict[str, Cols] | None:
        new = self.merge(self.derived(delta))
        if self.linear is None:  # a linear one's rounds go on in `after_first`
            for n in new or ():
                if height(self.versions[n]) > self.limit:
                    raise TooLarge(f"{n} knows more than {self.limit:,} versions")
        return new

    def derived(self, delta: dict[str, Cols] | None) -> dict[str, Cols]:
        """What the round after ``delta`` derives of each relation, one version a key (the
        first round's when ``delta`` is None); nothing is kept yet (see `merge`)."""
        a, b = self.window
        made: dict[str, list[Cols]] = {n: [] for n in self.stratum.relations}
        for rule in self.stratum.rules:
            negatives = [self.lower[x.relation] for x in rule.negations]
            for i in interpreter.variants(rule, delta):
                sources = [
                    delta[x.relation] if j == i and delta is not None else self._full(x.relation)
                    for j, x in enumerate(rule.scans)
                ]
                made[rule.relation].append(
                    _within(
                        self.stratum,
                        rule,
                        self.budgets,
                        R.derive,
                        sources,
                        negatives,
                        a,
                        b,
                        self.limit,
                    )
                )
        return {n: versions(self.schemas[n], rows) for n, rows in made.items()}

    def merge(self, made: Mapping[str, Cols]) -> dict[str, Cols] | None:
        """The versions of ``made`` no known version covers, kept (but a linear
        recursion's, whose later rounds run elsewhere); None when there are none."""
        new: dict[str, Cols] = {}
        for n, rows in made.items():
            schema = self.schemas[n]
            fresh = _uncovered(schema, rows, self.versions[n])
            if height(fresh):
                new[n] = fresh
                if self.linear is None:
                    self.versions[n] = versions(schema, [self.versions[n], fresh])
        return new or None

    def after_first(self, delta: dict[str, Cols], ran: int) -> tuple[dict[str, Cols] | None, int]:
        if self.linear is None:
            return delta, 0
        more = 0
        for n, fresh in delta.items():  # the later rounds: on the tasks' executor
            spread = dict(self.stratum.stable).get(n)
            left = self.budgets.rounds - ran
            given = (self.versions[n], fresh)
            self.finished[n], more, waiting = _linear_rounds(
                self.linear,
                self.schemas[n],
                given,
                self.state,
                self.window,
                self.budget,
                spread,
                left,
            )
            if waiting and more >= left:
                raise over("rounds", self.budgets, None, self.stratum, n)
            if waiting:
                raise TooLarge(f"{n} knows more than {self.budget} versions")
        return None, more

    def known(self) -> int:
        held = sum(map(height, self.versions.values()))
        return held + sum(t.num_rows for t in self.finished.values())


def rounds_from(
    stratum: StratumPlan,
    schemas: Mapping[str, Schema],
    lower: Mapping[str, Cols],
    earlier: Mapping[str, Cols],
    known: Mapping[str, Cols],
    delta: dict[str, Cols],
    window: tuple[int, int],
    limit: int,
    most: int,
    rounds: int,
    budgets: Budgets = BUDGETS,
) -> tuple[dict[str, Cols], dict[str, Cols] | None, int]:
    """The rounds of a recursive stratum after those that made ``known`` (its relations'
    versions of the epoch so far) and ``delta`` (the last round's new ones), as
    `interpreter.fixpoint` runs them, reading ``lower`` (lower strata's versions) and
    ``earlier`` (its relations' versions of earlier epochs). They stop, leaving the rest to
    whoever called, once ``rounds`` ran, once more than ``most`` versions are known, or
    before a round whose joins would pass ``limit`` matches or a budget: returns the
    versions known, one per key, what still waits to be joined (None: the fixpoint), and
    the rounds run."""
    rounds_here = _LocalRounds(
        stratum,
        schemas,
        lower.__getitem__,
        earlier.__getitem__,
        known,
        window,
        limit,
        budgets,
        None,
        0,
    )
    waiting: dict[str, Cols] | None = delta or None
    ran = 0
    while waiting is not None and ran < rounds and rounds_here.known() <= most:
        try:
            made = rounds_here.derived(waiting)
        except (TooLarge, BudgetExceeded):
            break  # the caller's rounds make this one, and say what went wrong
        waiting = rounds_here.merge(made)
        ran += 1
    return rounds_here.versions, waiting, ran


def _linear_rounds(
    plan: LinearPlan,
    schema: Schema,
    given: tuple[Cols, Cols],
    state: Callable[[str], Cols],
    window: tuple[int, int],
    budget: int,
    spread: int | None,
    rounds: int,
) -> tuple[pa.Table, int, bool]:
    """The rounds of a linear recursion after its first, run by `linear_fixpoint` here as
    Spark's tasks run them: from the relation's known versions and the fresh ones the next
    round joins (``given``), with its lower relations' versions (``state``). Spread on its
    stable argument (column ``spread``), each part is taken to its fixpoint on a thread
    of its own, as a task of its own on Spark (numpy lets go of the interpreter's lock).
    Its versions, one per key, the rounds run (at most ``rounds``), and whether versions
    still wait to be joined (a part came to know more than ``budget``, or ran out of
    rounds)."""
    arrow = arrow_schema(schema)
    rows = concat(  # as Spark's pieces come: the last one new
        [
            {**_as_stored(p, arrow), linear_fixpoint.NEW: np.full(height(p), new)}
            for p, new in zip(given, (False, True), strict=True)
        ]
    )
    lower = {r: state(r) for r in sorted(plan.lower)}
    parts = _spread(rows, schema.columns[spread] if spread is not None else None)

    def fixpoint(part: Cols) -> tuple[pa.Table, int]:
        return linear_fixpoint.fixpoint(plan, part, lower, *window, budget, rounds)

    if len(parts) == 1:
        done = [fixpoint(parts[0])]
    else:
        with ThreadPoolExecutor(len(parts), thread_name_prefix="pomo-rounds") as pool:
            done = list(pool.map(fixpoint, parts))
    out = pa.concat_tables([o for o, _ in done])
    waiting = bool(out[linear_fixpoint.NEW].to_numpy().any())
    return linear_fixpoint.as_stored(out, arrow), max(r for _, r in done), waiting


def _spread(rows: Cols, column: str | None) -> list[Cols]:
    """``rows`` cut in as many parts as this machine has cores (at most `THREADS`) by the
    hash of ``column``, a stable argument no rule moves: each part reaches its fixpoint
    alone. One part when there is no such argument or fewer than `SPREAD_ROWS` rows."""
    parts = min(os.cpu_count() or 1, THREADS)
    if column is None or parts == 1 or height(rows) < SPREAD_ROWS:
        return [rows]
    where = pd.util.hash_array(rows[column], categorize=False) % np.uint64(parts)
    cut = [take(rows, where == i) for i in range(parts)]
    return [c for c in cut if height(c)]


def _as_stored(rows: Cols, arrow: pa.Schema) -> Cols:
    """``rows`` with the columns and types of a stored epoch read back (as a task has them)."""
    return from_arrow(to_arrow(rows, arrow))


def _stored(schema: Schema, rows: Cols) -> Cols:
    """The stored columns of ``rows`` (a rule's versions carry more)."""
    return {c: rows[c] for c in R.row_columns(schema)}


def versions(schema: Schema, parts: list[Cols | None]) -> Cols:
    """The versions of ``parts``, one per ``(args, t, kt)`` (see `rules.dedupe`)."""
    frames = [_stored(schema, p) for p in parts if p is not None and height(p)]
    if not frames:
        return empty(schema)
    return R.dedupe(schema, concat(frames))


def _uncovered(schema: Schema, made: Cols, known: Cols) -> Cols:
    """The versions of ``made`` that no version of ``known`` covers: same ``(args, t,
    kt)``, living at least as long (``known`` holds one version a key)."""
    if not height(made) or not height(known):
        return made
    key = [*schema.columns, "t", "kt"]
    mine, theirs = pairs_on([made[c] for c in key], [known[c] for c in key])
    lasts = known["exp"][theirs] >= made["exp"][mine]
    if schema.provenance:  # and rests on every event it does (provenance only grows)
        lasts &= provenance.covered(known[PROV][theirs], made[PROV][mine])
    covered = np.zeros(height(made), dtype=bool)
    covered[mine[lasts]] = True
    return take(made, ~covered) if covered.any() else made
