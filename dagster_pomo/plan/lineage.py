"""Which body columns each stored column of a relation comes from (column lineage).

Read off the plan: a head argument's value comes from the variables in its expression,
each variable from the columns its scans read it from (every atom that binds it, since a
join makes them equal), a ``where`` variable from the variables of its definition, an
aggregate from the variables of its argument. Merged over every rule that derives the
relation. What a Dagster user sees as the asset's column lineage.
"""

from __future__ import annotations

from dagster_pomo.plan.corpus import CorpusPlan
from dagster_pomo.plan.exprs import Expr, variables
from dagster_pomo.plan.rules import RulePlan

Source = tuple[str, str]  # (relation, column)


def column_lineage(plan: CorpusPlan, relation: str) -> dict[str, set[Source]]:
    """Per stored column of ``relation`` (arguments, then aggregates), the columns of other
    relations it is computed from; a column made of constants only has none."""
    out: dict[str, set[Source]] = {}
    for stratum in plan.strata:
        for rule in stratum.own(relation):
            for column, sources in _rule_lineage(rule).items():
                out.setdefault(column, set()).update(sources)
    return out


def _rule_lineage(rule: RulePlan) -> dict[str, set[Source]]:
    of: dict[str, set[Source]] = {}
    for scan in rule.scans:
        for var, column, _ in scan.binds:
            of.setdefault(var, set()).add((scan.relation, column))

    def sources(expr: Expr) -> set[Source]:
        return set().union(*(of.get(v, set()) for v in variables(expr)))

    for agg in rule.body_aggregates:
        # The summarised atom's own variables: its columns, seen only by the argument.
        local = {var: {(agg.relation, column)} for var, column, _ in agg.scan.binds}
        summarised = [] if agg.arg is None else list(variables(agg.arg))
        of[agg.var] = set().union(*(local.get(v, set()) for v in summarised))

    for d in rule.defs:
        of[d.var] = of.get(d.var, set()) | sources(d.expr)
    out = {column: sources(expr) for expr, column, _ in rule.head.args}
    if rule.aggregate is not None:
        for _, arg, column, _ in rule.aggregate.functions:
            out[column] = sources(arg) if arg is not None else set()
    return out
