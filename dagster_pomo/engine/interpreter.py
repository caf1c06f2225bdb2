"""The one walk of a rule's steps (`plan/steps.py`), whatever executes them.

A backend supplies `Primitives`: one operation per kind of step, over its own sets of
matches (``M``: Spark DataFrames, numpy columns) and tables of versions (``T``). Which
steps run, in what order, over which window of time, and how ``@next`` versions are
stamped is decided here and in the plan, so the backends cannot differ in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, runtime_checkable

from dagster_pomo.plan.band_joins import Band
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
