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


def expiry(t: Any, lifetime: int | None, ops: Ops) -> Any:
    """When an event stamped ``t`` expires by its relation's lifetime alone."""
    if lifetime is None:
        return ops.constant(NEVER, t)
    return ops.where(t > NEVER - lifetime, ops.constant(NEVER, t), t + lifetime)


def head_times(tau: Any, t: Any, mexp: Any, lifetime: int | None, ops: Ops) -> tuple[Any, Any]:
    """A head's ``kt`` and ``exp`` for a match at ``tau`` alive until ``mexp``, stamped ``t``."""
    return ops.greatest(tau, t), ops.least(mexp, expiry(t, lifetime, ops))


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


def reaches(plan: Any, epoch_size: int) -> dict[str, int]:
    """An upper bound of ``exp - kt`` per relation of a `CorpusPlan`: how far back an epoch
    must read its versions. A lifetime where declared; a clock's longest period; an ``@next``
    relation's at most an epoch; a derived relation's at most its rules' shortest-living
    body atom (to a fixpoint); else `NEVER`."""
    program = plan.program
    catalog = program.catalog
    life: dict[str, int] = {
        rel.name: rel.lifetime if rel.lifetime is not None else NEVER for rel in catalog
    }
    if CLOCK in catalog:
        life[CLOCK] = max((p for _, p in plan.clocks), default=1)
    messages = {r.head.relation for r in program.corpus.rules if r.is_async}
    for rel in catalog:
        if rel.inductive and rel.name not in messages:
            life[rel.name] = min(life[rel.name], epoch_size)
    changed = True
    while changed:
        changed = False
        for rel in catalog:
            if not rel.derived or rel.lifetime is not None:
                continue
            bound = 0
            for rule in program.corpus.rules:
                if rule.head.relation != rel.name:
                    continue
                if rule.body and not rule.is_inductive:
                    # A body aggregate's piece may live as long as its match: no bound.
                    lives = (life[a.relation] for a in rule.positive)
                    bound = max(bound, min(lives, default=NEVER))
                else:
                    bound = NEVER
            if bound < life[rel.name]:
                life[rel.name], changed = bound, True
    return life


def reach_of(life: Mapping[str, int], relations: tuple[str, ...]) -> int:
    """How long a match of atoms of ``relations`` can live at most."""
    return min(life.get(r, NEVER) for r in relations)
