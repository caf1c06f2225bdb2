"""Which recursive strata can run their rounds inside a task (see ``rounds``).

The rounds after the first join only new versions of the recursive relation, so
only the rules that read it matter to them, and those must be simple enough to
evaluate without Spark's expression compiler: one atom of the relation, the
others (and any negated ones) of lower strata, every argument a variable or ``_``,
guards only comparisons of variables and constants of one type (integers,
strings, booleans), no ``where``, aggregates, annotations or explicit head time,
and a variable read from columns of one type that its head column has too. The
first round, which may use everything the language has, runs on Spark as before.
"""

from __future__ import annotations

from collections.abc import Mapping

from dagster_pomo.engine.rounds import OPS, AtomPlan, GuardPlan, LinearPlan, RulePlan
from dagster_pomo.engine.schema import Schema
from dagster_pomo.engine.timeline import NEVER
from dagster_pomo.lang import Stratum, ast
from dagster_pomo.lang.catalog import Catalog


def linear_plan(
    stratum: Stratum, schemas: Mapping[str, Schema], catalog: Catalog
) -> LinearPlan | None:
    """The plan of ``stratum``'s later rounds, or None when they need Spark."""
    if not stratum.recursive or len(stratum.relations) != 1:
        return None
    (name,) = stratum.relations
    plans = []
    for rule in stratum.rules:
        if any(a.relation == name for a in (*rule.positive, *rule.negative)):
            plan = _rule_plan(rule, name, schemas)
            if plan is None:
                return None
            plans.append(plan)
    if not plans:
        return None
    schema = schemas[name]
    return LinearPlan(name, schema.columns, catalog[name].lifetime, NEVER, tuple(plans))


def _rule_plan(rule: ast.Rule, name: str, schemas: Mapping[str, Schema]) -> RulePlan | None:
    if rule.defs or rule.head.annotations:
        return None
    if rule.head.time is not None or rule.is_inductive:
        return None
    own = [a for a in rule.positive if a.relation == name]
    if len(own) != 1:
        return None
    types: dict[str, str] = {}
    atoms = []
    for atom in rule.positive:
        plan = _atom_plan(atom, schemas[atom.relation], types)
        if plan is None:
            return None
        atoms.append(plan)
    head = []
    for arg, typ in zip(rule.head.args, schemas[name].types, strict=True):
        if not isinstance(arg, ast.Var) or types.get(arg.name) != typ:
            return None
        head.append(arg.name)
    negated = []
    for atom in rule.negative:
        plan = _atom_plan(atom, schemas[atom.relation], types)
        if plan is None or atom.relation == name:
            return None
        negated.append(plan)
    guards = []
    for guard in rule.guards:
        check = _guard_plan(guard, types)
        if check is None:
            return None
        guards.append(check)
    recursive = atoms[rule.positive.index(own[0])]
    others = _joinable([a for a in atoms if a is not recursive], recursive)
    return RulePlan(recursive, others, tuple(head), tuple(guards), tuple(negated))


_KINDS = {"int": "int", "duration": "int", "str": "str", "bool": "bool"}


def _guard_plan(guard: ast.Expr, types: dict[str, str]) -> GuardPlan | None:
    """A comparison of variables and constants of one type among integers, strings and
    booleans; None for anything else (arithmetic, calls, floats, whose NaN Spark orders)."""
    if not isinstance(guard, ast.BinOp) or guard.op not in OPS:
        return None
    sides = []
    for expr in (guard.left, guard.right):
        if isinstance(expr, ast.Var) and types.get(expr.name) in ("int", "str", "bool"):
            sides.append((("var", expr.name), types[expr.name]))
        elif isinstance(expr, ast.Const) and expr.kind in _KINDS:
            sides.append((("const", expr.value), _KINDS[expr.kind]))
        else:
            return None
    (left, lt), (right, rt) = sides
    return GuardPlan(guard.op, left, right) if lt == rt else None


def _joinable(atoms: list[AtomPlan], first: AtomPlan) -> tuple[AtomPlan, ...]:
    """``atoms`` in an order where each shares a variable with those before it when one can,
    so no pair of them is joined as a product while a join on a variable is to be had."""
    bound = {v for _, v in first.reads}
    out: list[AtomPlan] = []
    while atoms:
        pick = next((a for a in atoms if bound & {v for _, v in a.reads}), atoms[0])
        atoms.remove(pick)
        out.append(pick)
        bound |= {v for _, v in pick.reads}
    return tuple(out)


def _atom_plan(atom: ast.Atom, schema: Schema, types: dict[str, str]) -> AtomPlan | None:
    """The atom's reads; None when an argument is not a variable or ``_``, or a variable
    meets a column of another type (Spark would convert; pandas might not)."""
    if atom.annotations:
        return None
    reads: dict[str, str] = {}
    same = []
    for arg, column, typ in zip(atom.args, schema.columns, schema.types, strict=True):
        if isinstance(arg, ast.Wildcard):
            continue
        if not isinstance(arg, ast.Var) or types.setdefault(arg.name, typ) != typ:
            return None
        if arg.name in reads:
            same.append((reads[arg.name], column))
        else:
            reads[arg.name] = column
    return AtomPlan(atom.relation, tuple((c, v) for v, c in reads.items()), tuple(same))
