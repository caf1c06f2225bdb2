"""Which argument a recursive relation can be spread on, so its rounds need no shuffle.

In ``path(x, z) :- path(x, y), edge(y, z)`` every new ``path`` keeps the ``x`` of
the ``path`` it came from. Spread ``path`` over partitions by its first argument
and a round's new versions are born in the partition that already holds every
version they must be compared with: with the other relations broadcast, a round
moves no rows between partitions (BigDatalog calls such a recursion
decomposable). Same generation, whose head takes its arguments from other
relations, has no such argument and is spread on all of its key instead.
"""

from __future__ import annotations

from dagster_pomo.lang import Stratum, ast


def stable_argument(stratum: Stratum, relation: str) -> int | None:
    """The first argument of ``relation`` that every recursive rule passes through
    unchanged from each of its recursive atoms; None when there is none (or the stratum
    has several relations, whose arguments would have to agree with each other)."""
    if len(stratum.relations) != 1:
        return None
    rules = [
        r
        for r in stratum.rules
        if r.head.relation == relation and any(a.relation == relation for a in r.positive)
    ]
    if not rules:
        return None
    arity = len(rules[0].head.args)
    for j in range(arity):
        if all(_passes(rule, relation, j) for rule in rules):
            return j
    return None


def _passes(rule: ast.Rule, relation: str, j: int) -> bool:
    arg = rule.head.args[j]
    if not isinstance(arg, ast.Var):
        return False
    return all(
        isinstance(a.args[j], ast.Var) and a.args[j].name == arg.name
        for a in rule.positive
        if a.relation == relation
    )
