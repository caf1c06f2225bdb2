"""The one walk of a rule's steps (`plan/steps.py`), whatever executes them.

A backend supplies `Primitives`: one operation per kind of step, over its own sets of
matches (``M``: Spark DataFrames, numpy columns) and tables of versions (``T``). Which
steps run, in what order, over which window of time, and how ``@next`` versions are
stamped is decided here and in the plan, so the backends cannot differ in it. So is a
recursion's semi-naive loop (`fixpoint`): its rounds, their derivations (`variants`) and
its budgets; a backend keeps its versions as it can (`Rounds`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, runtime_checkable

from dagster_pomo.engine.budgets import Budgets, over
from dagster_pomo.plan.band_joins import Band
from dagster_pomo.plan.corpus import StratumPlan
from dagster_pomo.plan.rules import JoinKind, RulePlan
from dagster_pomo.plan.steps import (
    Alive,
    AntiJoin,
    Check,
    Choose,
    Filter,
    Join,
    Let,
    Make,
    Provenance,
    Read,
    Stamp,
    Steps,
    Summarise,
    Valid,
    Window,
)
from dagster_pomo.plan.time import next_stamp
from dagster_pomo.timeline import EARLIEST, NEVER, Epoch

M = TypeVar("M")  # a backend's set of matches
T = TypeVar("T")  # a backend's table of versions


@runtime_checkable
class Primitives(Protocol[M, T]):
    """What a backend does for each kind of step."""

    def read(self, step: Read, source: T) -> M: ...

    def join_on(self, left: M, right: M, on: Sequence[str]) -> M: ...

    def band_join(self, left: M, right: M, band: Band, index: int) -> M: ...

    def cross(self, left: M, right: M) -> M: ...

    def unit(self) -> M:
        """One match of no atom, alive always (a rule of body aggregates alone)."""
        ...

    def summarise(
        self, m: M, step: Summarise, sources: Sequence[T], window: tuple[int, int]
    ) -> M: ...

    def let(self, m: M, step: Let) -> M: ...

    def check(self, m: M, step: Check) -> M: ...

    def filter(self, m: M, step: Filter) -> M: ...

    def valid(self, m: M, window: Window, a: int, b: int) -> M:
        """The matches alive at their ``tau`` (``mexp > tau``) and in ``window`` of
        ``[a, b)``, with ``tau`` and ``mexp`` as columns."""
        ...

    def anti_join(self, m: M, step: AntiJoin, source: T, during: tuple[int, int] | None) -> M:
        """``m`` without the matches an agreeing version of the negated atom is alive for:
        at their ``tau``, or (``during``) at some instant of that window."""
        ...

    def choose(self, m: M, step: Choose, before: T) -> tuple[M, T]: ...

    def provenance(self, m: M, step: Provenance) -> M: ...

    def make(self, m: M, step: Make, stamp: tuple[int, int] | None) -> T:
        """The head's versions; ``stamp``: their ``t`` and ``exp`` (an ``@next`` rule's),
        else from each match."""
        ...

    def aggregate(self, m: M, rule: RulePlan, a: int, b: int) -> T: ...


@dataclass(frozen=True)
class Made(Generic[T]):
    """What a rule made: its versions, and per ``choose`` the rows of its table for keys
    chosen for the first time."""

    rows: T
    chosen: list[T]


def steps_of(rule: RulePlan) -> Steps:
    if rule.steps is None:
        raise ValueError(f"the rule at offset {rule.span.start} was not compiled")
    return rule.steps


def derive(
    rule: RulePlan,
    p: Primitives[M, T],
    sources: Sequence[T],
    negated: Sequence[T],
    a: int,
    b: int,
    before: Sequence[T] = (),
    previous: Epoch | None = None,
) -> Made[T]:
    """What ``rule`` makes over the window ``[a, b)``: ``sources`` one per scan, then one
    per body aggregate; ``negated`` one per negated atom; ``before`` per ``choose``, what
    earlier epochs chose; ``previous``: for an ``@next`` rule, the epoch whose versions it
    reads (the window is its)."""
    steps = steps_of(rule)
    m: M | None = None
    last: M | None = None
    chosen: list[T] = []
    for step in steps.body:
        if isinstance(step, Read):
            last = p.read(step, sources[step.scan.index])
            if m is None:
                m = last
            continue
        if isinstance(step, Join):
            assert m is not None and last is not None
            if step.kind is JoinKind.ON:
                m = p.join_on(m, last, step.on)
            elif step.kind is JoinKind.BAND:
                assert step.band is not None
                m = p.band_join(m, last, step.band, step.index)
            else:
                m = p.cross(m, last)
            continue
        if m is None:  # no positive atom: one match, alive always
            m = p.unit()
        if isinstance(step, Summarise):
            window = (a, b) if step.window is Window.MADE else (EARLIEST, NEVER)
            m = p.summarise(m, step, sources[step.scans :], window)
        elif isinstance(step, Let):
            m = p.let(m, step)
        elif isinstance(step, Check):
            m = p.check(m, step)
        elif isinstance(step, Filter):
            m = p.filter(m, step)
        elif isinstance(step, Valid):
            m = p.valid(m, step.window, a, b)
        elif isinstance(step, AntiJoin):
            during = (a, b) if step.alive is Alive.IN_WINDOW else None
            m = p.anti_join(m, step, negated[step.negation.index], during)
        elif isinstance(step, Choose):
            m, made = p.choose(m, step, before[step.index])
            chosen.append(made)
        elif isinstance(step, Provenance):
            m = p.provenance(m, step)
    assert m is not None
    if isinstance(steps.last, Make):
        stamp = None
        if steps.last.stamp is Stamp.NEXT:
            assert previous is not None
            stamp = next_stamp(previous, rule.head.lifetime, rule.asynchronous)
        return Made(p.make(m, steps.last, stamp), chosen)
    return Made(p.aggregate(m, rule, a, b), chosen)


def derive_next(
    rule: RulePlan,
    p: Primitives[M, T],
    sources: Sequence[T],
    negated: Sequence[T],
    previous: Epoch,
) -> T:
    """What an ``@next`` (or ``@async``) rule makes of the epoch ``previous``."""
    window = (previous.lower, previous.end)
    return derive(rule, p, sources, negated, *window, previous=previous).rows


# ---------------------------------------------------------------------------- recursion

D = TypeVar("D")  # a backend's new versions of a round, by relation


class Rounds(Protocol[D]):
    """What a backend does in a recursive stratum's semi-naive loop (`fixpoint`): a round
    derives with `variants` of each rule and keeps the versions no earlier round knows."""

    def round(self, delta: D | None) -> D | None:
        """One round (the first when ``delta`` is None): its new versions, or None."""
        ...

    def after_first(self, delta: D, ran: int) -> tuple[D | None, int]:
        """What the later rounds still have to join once a linear recursion's rounds ran
        elsewhere (``delta`` itself when none did), and how many rounds that took."""
        ...

    def known(self) -> int:
        """How many versions the stratum knows so far."""
        ...


def variants(rule: RulePlan, grew: Collection[str] | None) -> list[int | None]:
    """The derivations of ``rule`` in one semi-naive round: the first round once with every
    version (None); a later one once per body atom whose relation ``grew`` in the round
    before, that atom reading only those new versions."""
    if grew is None:
        return [None]
    return [i for i, scan in enumerate(rule.scans) if scan.relation in grew]


def fixpoint(rounds: Rounds[D], stratum: StratumPlan, budgets: Budgets) -> int:
    """A recursive stratum taken to its fixpoint, semi-naive: round after round while one
    makes versions no earlier one knew; how many rounds ran. `BudgetExceeded` past
    `Budgets.rounds` rounds or `Budgets.versions` versions (checked after every round)."""
    ran = 1
    delta = rounds.round(None)
    if delta is not None:
        delta, more = rounds.after_first(delta, ran)
        ran += more
    while delta is not None:
        _within_versions(rounds, stratum, budgets)
        ran += 1
        if ran > budgets.rounds:
            raise over("rounds", budgets, None, stratum)
        delta = rounds.round(delta)
    _within_versions(rounds, stratum, budgets)
    return ran


def _within_versions(rounds: Rounds[D], stratum: StratumPlan, budgets: Budgets) -> None:
    known = rounds.known()
    if known > budgets.versions:
        raise over("versions", budgets, known, stratum)
