"""The time rules every executing backend applies (docs/semantics.md, Events and times),
written once.

A match's time ``tau`` is the latest ``kt`` of its versions and it lives until the
first of them expires (``mexp``); it is valid when alive at ``tau``. A head without
an explicit time is stamped ``t = tau``; its ``kt`` is ``max(tau, t)`` and it expires
at ``min(mexp, t + lifetime)``, never past `NEVER`. An ``@next`` head is stamped at the
end of the epoch it was derived in and lives one epoch more (at most its lifetime); an
``@async`` head likewise, living its lifetime.

The arithmetic is written against `Ops`, so Spark columns and numpy arrays follow the
same lines; the reference evaluator keeps its own reading of the rules, so that the
differential tests compare two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dagster_pomo.lang.check import CLOCK
from dagster_pomo.timeline import NEVER, Epoch


@dataclass(frozen=True)
class Ops:
    """The element-wise functions a backend's values need beyond ``+``, ``-`` and
    comparisons: greatest, least, if-then-else, and a constant as long as ``like``."""

    greatest: Callable[[Any, Any], Any]
    least: Callable[[Any, Any], Any]
    where: Callable[[Any, Any, Any], Any]
    constant: Callable[[int, Any], Any]


PYTHON_OPS = Ops(max, min, lambda c, a, b: a if c else b, lambda value, _: value)
"""`Ops` over plain Python integers: one event at a time, as ingestion reads lines."""


def expiry(t: Any, lifetime: int | None, ops: Ops) -> Any:
    """When an event stamped ``t`` expires by its relation's lifetime alone."""
    if lifetime is None:
        return ops.constant(NEVER, t)
    return ops.where(t > NEVER - lifetime, ops.constant(NEVER, t), t + lifetime)


def head_times(tau: Any, t: Any, mexp: Any, lifetime: int | None, ops: Ops) -> tuple[Any, Any]:
    """A head's ``kt`` and ``exp`` for a match at ``tau`` alive until ``mexp``, stamped ``t``
    (``kt`` is ``tau`` itself when ``t`` is: no copy of a column for nothing)."""
    kt = tau if t is tau else ops.greatest(tau, t)
    return kt, ops.least(mexp, expiry(t, lifetime, ops))


def next_stamp(
    previous: Epoch, lifetime: int | None, asynchronous: bool = False
) -> tuple[int, int]:
    """``(t, exp)`` of an ``@next`` head derived in ``previous``: its end, and one epoch later
    (or its lifetime, when shorter). An ``@async`` head (a message) lives its lifetime from
    then, for ever without one."""
    b = previous.end
    if asynchronous:
        return b, NEVER if lifetime is None else min(NEVER, b + lifetime)
    length = previous.end - previous.start
    return b, b + length if lifetime is None else min(b + length, b + lifetime)


@dataclass(frozen=True)
class Lives:
    """What bounds how long each relation's versions live, read off a corpus once
    (`lives_of`): its declared lifetimes, the ``@next`` relations that live at most an
    epoch (messages, made by ``@async`` rules, do not), and per derived relation without a
    lifetime the positive relations of each of its rules (None: a fact, an ``@next`` rule,
    or no bound)."""

    declared: Mapping[str, int | None]
    capped: frozenset[str]
    fed: Mapping[str, tuple[tuple[str, ...] | None, ...]]


def lives_of(program: Any) -> Lives:
    """The `Lives` of a checked `Program`."""
    catalog = program.catalog
    rules = program.corpus.rules
    messages = {r.head.relation for r in rules if r.is_async}
    fed: dict[str, list[tuple[str, ...] | None]] = {}
    for rel in catalog:
        if rel.derived and rel.lifetime is None:
            fed[rel.name] = [
                tuple(a.relation for a in r.positive) if r.body and not r.is_inductive else None
                for r in rules
                if r.head.relation == rel.name
            ]
    return Lives(
        {rel.name: rel.lifetime for rel in catalog},
        frozenset(r.name for r in catalog if r.inductive and r.name not in messages),
        {name: tuple(each) for name, each in fed.items()},
    )


def reaches(plan: Any, epoch_size: int) -> dict[str, int]:
    """An upper bound of ``exp - kt`` per relation of a `CorpusPlan`: how far back an epoch
    must read its versions. A lifetime where declared; a clock's longest period; an ``@next``
    relation's at most an epoch; a derived relation's at most its rules' shortest-living
    body atom (to a fixpoint); else `NEVER`."""
    lives: Lives = plan.lives
    life = {
        name: NEVER if lifetime is None else lifetime for name, lifetime in lives.declared.items()
    }
    if CLOCK in life:
        life[CLOCK] = max((p for _, p in plan.clocks), default=1)
    for name in lives.capped:
        life[name] = min(life[name], epoch_size)
    changed = True
    while changed:
        changed = False
        for name, rules in lives.fed.items():
            bound = 0
            for positive in rules:
                # A body aggregate's piece may live as long as its match: no bound.
                lives_for = (
                    NEVER if positive is None else min((life[r] for r in positive), default=NEVER)
                )
                bound = max(bound, lives_for)
            if bound < life[name]:
                life[name], changed = bound, True
    return life


def reach_of(life: Mapping[str, int], relations: tuple[str, ...]) -> int:
    """How long a match of atoms of ``relations`` can live at most."""
    return min(life.get(r, NEVER) for r in relations)
