"""What a corpus fixes before any event arrives: constant ``where`` values and its clocks.

Both evaluators need these (clock arguments must be constants), so they are
worked out once, here.
"""

from __future__ import annotations

from collections.abc import Iterable

from dagster_pomo.lang import Program, ast
from dagster_pomo.lang.check import CLOCK, binding_of
from dagster_pomo.lang.interpret import Undefined, Value, evaluate
from dagster_pomo.timeline import first_tick


def constant_values(rule: ast.Rule) -> dict[str, Value]:
    """The rule's ``where`` definitions that depend on no event, evaluated. One that is
    undefined (``1 / 0``) is left out, with those that use it: each match then works it out
    as any definition, finds it undefined, and is dropped, as docs/semantics.md says."""
    b = binding_of(rule)
    env: dict[str, Value] = {}
    for d in b.def_order:
        if d.var.name in b.constant_defs:
            try:
                env[d.var.name] = evaluate(d.expr, env)
            except Undefined:
                continue
    return env


def clocks(program: Program) -> set[tuple[int, int]]:
    """Every ``(offset, period)`` the corpus's rules read ``clock`` with (periods > 0)."""
    found: set[tuple[int, int]] = set()
    for rule in program.corpus.rules:
        env = constant_values(rule)
        for atom in rule.positive:
            if atom.relation == CLOCK:
                offset, period = (int(evaluate(a, env)) for a in atom.args)
                if period > 0:
                    found.add((offset, period))
    return found


def tick_ranges(
    clocked: Iterable[tuple[int, int]], clock_start: int, start: int, end: int
) -> list[tuple[int, int, int, int]]:
    """``(offset, period, first, stop)`` for each clock with ticks alive at some instant of
    ``[start, end)``: ticks ``k`` in ``[first, stop)``, at ``offset + k * period``, none
    before ``clock_start``."""
    begin = max(start, clock_start)
    out = []
    for o, p in sorted(clocked):
        first = first_tick(o, p, begin)
        stop = -((o - end) // p)  # ticks before `end`: k < ceil((end - o) / p)
        if first < stop:
            out.append((o, p, first, stop))
    return out
