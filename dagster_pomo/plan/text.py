"""A corpus plan as text: what ``pomo plan`` prints and golden files pin.

One block per stratum, one per rule in it, one line per step (`steps.py`) in the order
every executor takes them: scans (each with how it joins those before it), body
aggregates, definitions, checks, guards, the valid matches, negations, choices,
provenance, the aggregate and the head.
"""

from __future__ import annotations

from dagster_pomo.plan.corpus import CorpusPlan, StratumPlan
from dagster_pomo.plan.exprs import render
from dagster_pomo.plan.linear_rounds import LinearAtom, LinearPlan
from dagster_pomo.plan.rules import Aggregate as RuleAggregate
from dagster_pomo.plan.rules import Head, Join, JoinKind, RulePlan, Scan
from dagster_pomo.plan.steps import (
    Aggregate,
    Alive,
    AntiJoin,
    Check,
    Choose,
    Filter,
    Let,
    Provenance,
    Read,
    Step,
    Summarise,
    Valid,
    Window,
)
from dagster_pomo.timeline import show_duration


def render_plan(plan: CorpusPlan) -> str:
    lines = [f"plan {plan.name}"]
    if plan.defers:
        lines.append(f"  defers: {', '.join(sorted(plan.defers))}")
    if plan.clocks:
        clocks = ", ".join(f"clock({o}, {show_duration(p)})" for o, p in plan.clocks)
        lines.append(f"  clocks: {clocks}")
    for stratum in plan.strata:
        lines += _stratum(plan, stratum)
    return "\n".join(lines) + "\n"


def _stratum(plan: CorpusPlan, stratum: StratumPlan) -> list[str]:
    kind = "@next" if stratum.inductive else "recursive" if stratum.recursive else "deductive"
    if stratum.recursive:
        kind += ", linear" if stratum.linear is not None else ", not linear"
        if stratum.provenance(plan.schemas):
            kind += " (merges provenance each round)"
        spread = [
            f"{n} on {plan.schemas[n].columns[j]}" for n, j in stratum.stable if j is not None
        ]
        if spread:
            kind += f", spread {', '.join(spread)}"
    lines = [f"stratum {stratum.index} ({kind}): {', '.join(stratum.relations)}"]
    if not stratum.rules:
        lines.append("  (facts and input only)")
    for rule in stratum.rules:
        lines += ["  " + line for line in _rule(plan, rule)]
    if stratum.linear is not None:
        lines += _linear(stratum.linear)
    return lines


def _linear(plan: LinearPlan) -> list[str]:
    """The later rounds of a linear recursion as the tasks run them (`linear_rounds`): each
    rule joins the round's new versions (``new``) to lower strata's relations."""
    lines = ["  later rounds, inside tasks:"]
    for rule in plan.rules:
        atoms = [_linear_atom(rule.recursive, "new "), *map(_linear_atom, rule.others)]
        atoms += ["!" + _linear_atom(a) for a in rule.negated]
        guards = [f"{_side(g.left)} {g.op} {_side(g.right)}" for g in rule.guards]
        lines.append(f"    {plan.relation}({', '.join(rule.head)}) := {' ^ '.join(atoms + guards)}")
    return lines


def _linear_atom(atom: LinearAtom, prefix: str = "") -> str:
    reads = ", ".join(f"{v} <- {c}" if v != c else v for c, v in atom.reads)
    same = "".join(f" {a} == {b}" for a, b in atom.same)
    return f"{prefix}{atom.relation} [{reads}]{same}"


def _side(side: tuple[str, object]) -> str:
    kind, value = side
    return str(value) if kind == "var" else _value(value)


def _rule(plan: CorpusPlan, rule: RulePlan) -> list[str]:
    line = rule.span.line
    at = f"line {line}" if line > 0 else "generated"
    lines = [f"rule ({at}): {rule.text}"]
    if rule.constants:
        shown = ", ".join(f"{k} = {_value(v)}" for k, v in rule.constants.items())
        lines.append(f"  constants {shown}")
    assert rule.steps is not None
    for step in rule.steps.body:
        lines += ["  " + text for text in _step(step, rule)]
    last = rule.steps.last
    if isinstance(last, Aggregate):
        lines += ["  " + text for text in _aggregate(last.aggregate)]
    lines.append("  " + _head(rule, last.head))
    return lines


def _step(step: Step, rule: RulePlan) -> list[str]:
    """A step as the lines ``pomo plan`` prints (a scan's join on its line)."""
    if isinstance(step, Read):
        return [_scan(step.scan) + (" (keyed by event)" if step.keyed else "")]
    if isinstance(step, Summarise):
        lines = []
        for agg in step.aggregates:
            arg = "" if agg.arg is None else f" {render(agg.arg)}"
            empty = "no match" if agg.empty is None else _value(agg.empty)
            within = " starting in the epoch" if step.window is Window.MADE else ""
            lines.append(
                f"summarise {agg.var}:{agg.type} = {agg.function}{arg} over {_scan(agg.scan)}"
                f" alive at tau{within}; over none: {empty}"
            )
            for pos, expr, column, typ in agg.scan.checks:
                lines.append(f"  check {column}:{typ} == {render(expr)} (argument {pos})")
        return lines
    if isinstance(step, Let):
        d = step.definition
        return [f"define {d.var}:{d.type} = {render(d.expr)}"]
    if isinstance(step, Check):
        return [
            f"check {step.column}:{step.type} == {render(step.expr)} "
            f"(atom {step.scan}, argument {step.position})"
        ]
    if isinstance(step, Filter):
        return [f"guard {render(step.guard)}"]
    if isinstance(step, Valid):
        return [f"valid: alive at tau, {_WINDOWS[step.window]}"]
    if isinstance(step, AntiJoin):
        negation = step.negation
        compared = ", ".join(
            f"{column} == {render(arg)}" for arg, column, _ in negation.columns if arg is not None
        )
        alive = "at tau" if step.alive is Alive.AT_TAU else "in the epoch before"
        return [f"anti-join {negation.relation} alive {alive} on ({compared})"]
    if isinstance(step, Choose):
        choice = step.choice
        keys, values = ", ".join(choice.keys), ", ".join(choice.values)
        return [
            f"choose per ({keys}) the least ({values}) at the first tau, for ever after; "
            f"kept in {choice.table.name}"
        ]
    if isinstance(step, Provenance):
        sources = [
            f"{s.relation} {'its provenance' if s.provenance == 'stored' else 'its content ID'}"
            for s in (rule.scans[i] for i in step.scans)
        ]
        return [f"provenance = union of {', '.join(sources) or 'nothing'}"]
    return []  # a join: printed with its scan


_WINDOWS = {
    Window.MADE: "made in the epoch",
    Window.SLIDING: "in the epoch or expired at its start",
    Window.ALL: "whenever made",
}


def _aggregate(aggregate: RuleAggregate) -> list[str]:
    fns = ", ".join(
        f"{fn}({'' if arg is None else render(arg)}) -> {column}:{typ}"
        for fn, arg, column, typ in aggregate.functions
    )
    lines = [f"aggregate {fns}; reach from {', '.join(aggregate.reach_from)}"]
    if aggregate.at_one_time:
        lines.append("  each group's matches made at one time: grouped, no running window")
    if aggregate.one_version_each:
        lines.append("  one version a combination of events: alive from tau to its expiry")
    if aggregate.lattice is not None:
        lines.append(f"  lattice: the merge registered as {aggregate.lattice!r}")
    return lines


def _head(rule: RulePlan, head: Head) -> str:
    args = ", ".join(f"{col}:{typ} = {render(arg)}" for arg, col, typ in head.args)
    time = "tau"
    if rule.inductive:
        time = (
            "end of epoch (@async: each match of the epoch)"
            if rule.asynchronous
            else ("end of epoch (@next)")
        )
    if head.time is not None:
        time = render(head.time)
    life = "none" if rule.head.lifetime is None else show_duration(rule.head.lifetime)
    return f"head {head.relation}({args}) t = {time}, lifetime {life}"


def _scan(scan: Scan) -> str:
    binds = ", ".join(
        f"{var} <- {column}:{typ}" if var != column else f"{var}:{typ}"
        for var, column, typ in scan.binds
    )
    parts = [f"scan {scan.relation} [{binds}]"]
    for a, b in scan.same:
        parts.append(f"{a} == {b}")
    for const, column, _ in scan.constants:
        parts.append(f"{column} == {render(const)}")
    return " ".join(parts) + _join(scan.join)


def _join(join: Join) -> str:
    if join.kind is JoinKind.FIRST:
        return ""
    if join.kind is JoinKind.ON:
        return f" join on ({', '.join(join.on)})"
    if join.band is not None:
        band = join.band
        return f" join on buckets of {band.left} - {band.right} in [{band.low}, {band.high}]"
    return " cross join"


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(v)
