"""A warning for rules whose events expire before their own time.

A derived event lives until the earliest expiry of the events it was derived from. When a
rule stamps its head later than one of those can live (``late(x) @time(t + 20m) :=
level(x) @time(t)`` with ``level`` living ten minutes), every event it derives has expired
at its own time: no rule can ever match it, and no handler should act on it.
"""

from __future__ import annotations

from collections.abc import Iterator

from dagster_pomo.lang import ast
from dagster_pomo.lang.catalog import Catalog
from dagster_pomo.lang.check import CLOCK
from dagster_pomo.lang.errors import Diagnostic, Severity


def _offset(expr: ast.Expr) -> tuple[str, int] | None:
    """``(v, c)`` when ``expr`` is ``v``, ``v + c`` or ``c + v`` with ``c`` a constant
    number of milliseconds; None otherwise."""
    if isinstance(expr, ast.Var):
        return expr.name, 0
    if isinstance(expr, ast.BinOp) and expr.op == "+":
        for var, const in ((expr.left, expr.right), (expr.right, expr.left)):
            if (
                isinstance(var, ast.Var)
                and isinstance(const, ast.Const)
                and const.kind in ("int", "duration")
            ):
                return var.name, int(const.value)
    return None


def check_expiry(rule: ast.Rule, catalog: Catalog) -> Iterator[Diagnostic]:
    """A warning at the head's ``@time`` when it lies at or after the end of the life of a
    positive body atom whose time it is offset from."""
    stamp = rule.head.time
    shifted = _offset(stamp) if stamp is not None and rule.body else None
    if shifted is None:
        return
    var, delay = shifted
    for atom in rule.positive:
        if atom.relation == CLOCK or not isinstance(atom.time, ast.Var):
            continue
        lifetime = catalog[atom.relation].lifetime
        if atom.time.name == var and lifetime is not None and delay >= lifetime:
            assert stamp is not None
            yield Diagnostic(
                f"every event this rule derives has expired at its own time: `{atom.relation}` "
                f"lives {_shown(lifetime)} and the head is stamped {_shown(delay)} after it",
                stamp.span,
                f"stamp the head less than {_shown(lifetime)} later, or give "
                f"`{atom.relation}` a longer lifetime",
                Severity.WARNING,
            )
            return


def _shown(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
