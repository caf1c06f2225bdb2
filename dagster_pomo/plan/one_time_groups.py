"""Aggregates whose groups each match at one time: a grouping, not a running window.

A running aggregate answers, for each group, at every time one of its matches is made,
over the matches alive then (docs/semantics.md, "Aggregates over versions"). When the
head's explicit time is the time of one body atom, give or take a constant, and the guards
keep every other atom's events no later than it, all the matches of a group are made at
that one time: the aggregate is a grouping of the group's distinct matches alive then. This
is the resampling shape, ``@time(tick - period / 2)`` over readings before ``tick``; a
grouping costs a shuffle where the running window costs a sort and a sweep.

A match is made at its versions' latest ``kt``; the guards speak of event times ``t``.
Only relations whose versions are known at their own time (``kt = t``: input events,
facts and clock ticks; a derived event may become known later) let one stand for the
other. Their events have one version each, so each combination of events is one match.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from dagster_pomo.plan.band_joins import no_later
from dagster_pomo.plan.exprs import Arith, Arithmetic, Expr, Var, variables
from dagster_pomo.plan.rules import RulePlan


def at_one_time(rule: RulePlan, known_at_their_time: Collection[str]) -> bool:
    """Whether each group of ``rule``'s aggregate has all its matches made at one time.
    ``known_at_their_time``: the relations whose versions all have ``kt = t``."""
    if rule.aggregate is None or rule.head.time is None or rule.body_aggregates:
        return False
    latest = _shifted(rule.head.time, rule.constants)
    times = []
    for scan in rule.scans:
        var = next((v for v, column, _ in scan.binds if column == "t"), None)
        if scan.relation not in known_at_their_time or var is None:
            return False
        times.append(var)
    if latest is None or latest not in times:
        return False
    return all(v == latest or no_later(v, latest, rule.guards, rule.constants) for v in times)


def one_version_each(rule: RulePlan, known_at_their_time: Collection[str]) -> bool:
    """Whether each combination of events ``rule``'s aggregate matches does so in one
    version: every scan reads a relation whose versions all have ``kt = t``, which makes
    one version an event (versions are one per ``(args, t, kt)``). Then a combination's
    match lives from its ``tau`` to its expiry, with no later version to cut it short."""
    if rule.aggregate is None or rule.body_aggregates:
        return False
    return all(scan.relation in known_at_their_time for scan in rule.scans)


def _shifted(expr: Expr, constants: Mapping[str, object]) -> str | None:
    """``T`` when ``expr`` is the variable ``T`` plus or minus an expression of constants
    (then the group's time tells ``T``), else None."""
    if isinstance(expr, Var):
        return None if expr.name in constants else expr.name
    if isinstance(expr, Arithmetic) and expr.op in (Arith.ADD, Arith.SUB):
        if _constant(expr.right, constants):
            return _shifted(expr.left, constants)
        if expr.op is Arith.ADD and _constant(expr.left, constants):
            return _shifted(expr.right, constants)
    return None


def _constant(expr: Expr, constants: Mapping[str, object]) -> bool:
    return all(v in constants for v in variables(expr))
