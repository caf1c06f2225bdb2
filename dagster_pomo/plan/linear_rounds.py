"""Which recursive strata can run their rounds on the tasks' executor (``linear_fixpoint``).

The rounds after the first join only new versions of the recursive relation, so
only the rules that read it matter to them, and those must be simple enough to
evaluate without an expression compiler: one atom of the relation, the others (and
any negated ones) of lower strata, every argument a variable or ``_``, guards only
comparisons of variables and constants of one type (integers, strings, booleans), no
``where``, aggregates, annotations or explicit head time, and a variable read from
columns of one type that its head column has too. The plan is made from the
stratum's `RulePlan`s. The first round, which may use everything the language has,
runs on the other executors.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster_pomo.lang.catalog import Catalog
from dagster_pomo.plan.exprs import Compare, Expr, Literal, Var
from dagster_pomo.plan.schema import Schema

if TYPE_CHECKING:  # the plans these are made from; tasks get this module without them
    from dagster_pomo.plan.corpus import StratumPlan
    from dagster_pomo.plan.rules import Negation, RulePlan, Scan


@dataclass(frozen=True)
class LinearAtom:
    """A positive atom: the stored column each variable reads, and columns that must agree
    (a variable written twice in the atom)."""

    relation: str
    reads: tuple[tuple[str, str], ...]  # (column, variable)
    same: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LinearGuard:
    """``left op right``, each side a variable (its name) or a constant (its value), of one
    type: integers, strings or booleans, which numpy compares as Spark does."""

    op: str
    left: tuple[str, Any]  # ("var", name) or ("const", value)
    right: tuple[str, Any]


OPS = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True)
class LinearRule:
    """A rule with exactly one atom of the recursive relation; the others are lower strata's,
    as are the ``negated`` atoms. ``head`` names the variable of each head argument."""

    recursive: LinearAtom
    others: tuple[LinearAtom, ...]
    head: tuple[str, ...]
    guards: tuple[LinearGuard, ...] = ()
    negated: tuple[LinearAtom, ...] = ()


@dataclass(frozen=True)
class LinearPlan:
    relation: str
    columns: tuple[str, ...]  # the relation's arguments, in order
    lifetime: int | None  # of the relation's events; None: they never expire
    rules: tuple[LinearRule, ...]

    @property
    def key(self) -> list[str]:
        """What tells versions apart."""
        return [*self.columns, "t", "kt"]

    @property
    def lower(self) -> set[str]:
        return {a.relation for r in self.rules for a in (*r.others, *r.negated)}


def linear_plan(
    stratum: StratumPlan, schemas: Mapping[str, Schema], catalog: Catalog
) -> LinearPlan | None:
    """The plan of ``stratum``'s later rounds, from its rules' plans; None when they need
    Spark."""
    if not stratum.recursive or len(stratum.relations) != 1:
        return None
    (name,) = stratum.relations
    plans = []
    for rule in stratum.rules:
        if any(x.relation == name for x in (*rule.scans, *rule.negations)):
            plan = _rule_plan(rule, name, schemas)
            if plan is None:
                return None
            plans.append(plan)
    if not plans:
        return None
    schema = schemas[name]
    return LinearPlan(name, schema.columns, catalog[name].lifetime, tuple(plans))


def _rule_plan(rule: RulePlan, name: str, schemas: Mapping[str, Schema]) -> LinearRule | None:
    head = rule.head
    if rule.defs or rule.aggregate is not None or rule.body_aggregates or rule.choices:
        return None
    if head.time is not None or head.provenance or rule.inductive:
        return None
    own = [x for x in rule.scans if x.relation == name]
    if len(own) != 1:
        return None
    types: dict[str, str] = {}
    atoms = []
    for scan in rule.scans:
        plan = _scan_plan(scan, schemas[scan.relation], types)
        if plan is None:
            return None
        atoms.append(plan)
    args = []
    for arg, _, typ in head.args:
        if not isinstance(arg, Var) or types.get(arg.name) != typ:
            return None
        args.append(arg.name)
    negated = []
    for negation in rule.negations:
        plan = _negated_plan(negation, types)
        if plan is None or negation.relation == name:
            return None
        negated.append(plan)
    guards = []
    for guard in rule.guards:
        check = _guard_plan(guard, types)
        if check is None:
            return None
        guards.append(check)
    recursive = atoms[rule.scans.index(own[0])]
    others = _joinable([a for a in atoms if a is not recursive], recursive)
    return LinearRule(recursive, others, tuple(args), tuple(guards), tuple(negated))


_KINDS = ("int", "str", "bool")


def _guard_plan(guard: Expr, types: dict[str, str]) -> LinearGuard | None:
    """A comparison of variables and constants of one type among integers, strings and
    booleans; None for anything else (arithmetic, calls, floats, whose NaN Spark orders)."""
    if not isinstance(guard, Compare):
        return None
    sides = []
    for expr in (guard.left, guard.right):
        if isinstance(expr, Var) and types.get(expr.name) in _KINDS:
            sides.append(("var", expr.name))
        elif isinstance(expr, Literal) and expr.type in _KINDS:
            sides.append(("const", expr.value))
        else:
            return None
    left, right = sides
    return LinearGuard(guard.op.value, left, right)


def _joinable(atoms: list[LinearAtom], first: LinearAtom) -> tuple[LinearAtom, ...]:
    """``atoms`` in an order where each shares a variable with those before it when one can,
    so no pair of them is joined as a product while a join on a variable is to be had."""
    bound = {v for _, v in first.reads}
    out: list[LinearAtom] = []
    while atoms:
        pick = next((a for a in atoms if bound & {v for _, v in a.reads}), atoms[0])
        atoms.remove(pick)
        out.append(pick)
        bound |= {v for _, v in pick.reads}
    return tuple(out)


def _scan_plan(scan: Scan, schema: Schema, types: dict[str, str]) -> LinearAtom | None:
    """The scan's reads; None when it matches constants or expressions, reads anything but
    argument columns (a time, an aggregate's value, a content ID), carries provenance, or
    a variable meets a column of another type (Spark would convert; pandas might not)."""
    if scan.constants or scan.checks or scan.provenance:
        return None
    typed = dict(zip(schema.columns, schema.types, strict=True))
    for var, column, typ in scan.binds:
        if column not in typed or types.setdefault(var, typ) != typ:
            return None
    if any(typed[a] != typed[b] for a, b in scan.same):
        return None
    return LinearAtom(scan.relation, tuple((c, v) for v, c, _ in scan.binds), scan.same)


def _negated_plan(negation: Negation, types: dict[str, str]) -> LinearAtom | None:
    """A negated atom's reads; None when an argument is not a variable or ``_``, or a
    variable meets a column of another type."""
    reads: dict[str, str] = {}
    same = []
    for arg, column, typ in negation.columns:
        if arg is None:
            continue
        if not isinstance(arg, Var) or types.setdefault(arg.name, typ) != typ:
            return None
        if arg.name in reads:
            same.append((reads[arg.name], column))
        else:
            reads[arg.name] = column
    return LinearAtom(negation.relation, tuple((c, v) for v, c in reads.items()), tuple(same))
