"""Kinds of values an expression can have, as far as the corpus alone tells.

A guard that compares a number with text, or arithmetic on text, is undefined at
run time (docs/semantics.md, "Values"): the match that needs it never happens,
so such a rule silently derives nothing. Where the kinds are known from the
corpus (declared columns, constants, clocks, ``@time`` and ``where``
definitions), :func:`check_kinds` says so as a warning, at the expression.
The engine works out the types of undeclared columns later, from the data,
with the same :func:`expr_type` and :func:`variable_types`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from dagster_pomo.lang import ast
from dagster_pomo.lang.catalog import KIND_NAMES, Catalog
from dagster_pomo.lang.check import CLOCK, binding_of
from dagster_pomo.lang.errors import Diagnostic, Severity
from dagster_pomo.lang.render import render_expr

_NUMERIC = frozenset({"int", "float"})


def widen(a: str | None, b: str | None) -> str | None:
    """The type of a column receiving ``a`` and ``b``; ``ValueError`` if none can hold both."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    if {a, b} == _NUMERIC:
        return "float"
    if (x := element_of(a)) is not None and (y := element_of(b)) is not None:
        return set_of(str(widen(x, y)))
    raise ValueError(f"{a} and {b}")


def expr_type(expr: ast.Expr, env: Mapping[str, str]) -> str | None:
    """The type of ``expr``, or None if unknown yet (or undefined, e.g. text arithmetic)."""
    if isinstance(expr, ast.Const):
        return {"duration": "int"}.get(expr.kind, expr.kind)
    if isinstance(expr, ast.Var):
        return env.get(expr.name)
    if isinstance(expr, ast.Neg):
        return expr_type(expr.operand, env)
    if isinstance(expr, ast.BinOp):
        if expr.op in ast.COMPARISONS:
            return "bool"
        left, right = expr_type(expr.left, env), expr_type(expr.right, env)
        if left == right == "int":
            return "int"
        return "float" if {left, right} <= _NUMERIC else None
    if isinstance(expr, ast.Call):
        args = [expr_type(a, env) for a in expr.args]
        if expr.func in ("floor", "ceil", "round", "length", "int"):
            return "int"
        if expr.func in ("lower", "upper", "concat", "str"):
            return "str"
        if expr.func == "float":
            return "float"
        try:
            found: str | None = None
            for a in args:
                found = widen(found, a)
            return found
        except ValueError:
            return None
    return None


def variable_types(
    rule: ast.Rule,
    columns: Callable[[str], Sequence[str | None] | None],
    aggregates: Callable[[str], Mapping[str, str]] = lambda _: {},
) -> dict[str, str]:
    """Types of the variables ``rule`` binds, as far as they are known: from its positive
    atoms (``columns`` gives a relation's column types, None where one is unknown, or None
    when nothing of the relation is known, and the atom tells nothing), ``@time`` (an
    integer) and the aggregates an atom reads back (``aggregates``: their types by
    function), then from its ``where`` definitions in the order they resolve. A clock's
    arguments configure it and bind nothing."""
    env: dict[str, str] = {}
    for atom in rule.positive:
        _bind(atom, env, columns, aggregates)
    for lit in rule.body_aggregates:
        assert lit.aggregation is not None
        local = dict(env)  # the atom's own variables are its alone
        _bind(lit.atom, local, columns, aggregates)
        arg = lit.aggregation.arg
        typ = aggregate_type(
            lit.aggregation.function, None if arg is None else expr_type(arg, local)
        )
        if typ is not None:
            env.setdefault(lit.aggregation.var.name, typ)
    for d in binding_of(rule).def_order if rule.defs else ():
        typ = expr_type(d.expr, env)
        if typ is not None:
            env[d.var.name] = typ
    return env


def _bind(
    atom: ast.Atom,
    env: dict[str, str],
    columns: Callable[[str], Sequence[str | None] | None],
    aggregates: Callable[[str], Mapping[str, str]],
) -> None:
    """Add the types of the variables ``atom`` binds to ``env`` (those not there yet)."""
    types = columns(atom.relation)
    if types is None:
        return
    if atom.relation != CLOCK:
        for arg, typ in zip(atom.args, types, strict=False):
            if isinstance(arg, ast.Var) and typ is not None:
                env.setdefault(arg.name, typ)
    carried = aggregates(atom.relation)
    for ann in atom.annotations:
        if ann.args and isinstance(ann.args[0], ast.Var):
            # `@time` and `@cid` bind values of the column types of their names.
            typ = ast.stored_type(ann.name) if ann.name in ast.STORED_AS else None
            typ = typ or carried.get(ann.name)
            if typ is not None:
                env.setdefault(ann.args[0].name, typ)


def aggregate_type(function: str, arg: str | None) -> str | None:
    """The type of an aggregate of values of type ``arg``: a count is an integer, an average
    a float, the others the values' type."""
    if function == "count":
        return "int"
    if function == "average":
        return "float"
    if function == "collect":
        return None if arg is None else set_of(arg)
    return arg


def set_of(element: str) -> str:
    """The type of a set of values of type ``element`` (a `@collect`): ``set<element>``."""
    return f"set<{element}>"


def element_of(typ: str) -> str | None:
    """The element type of a set type, or None for a scalar type."""
    return typ[4:-1] if typ.startswith("set<") else None


def _declared(catalog: Catalog) -> Callable[[str], tuple[str | None, ...]]:
    """A relation's declared column types (``time`` is an integer), None where undeclared."""
    return lambda name: tuple(
        None if t is None else ast.stored_type(t) for t in catalog[name].types
    )


def _family(kind: str) -> str:
    return "number" if kind in _NUMERIC else kind


def _times(rule: ast.Rule, catalog: Catalog) -> set[str]:
    """Variables holding times (``@time`` or a ``time`` column): integers, named as times."""
    out: set[str] = set()
    for atom in rule.positive:
        types = catalog[atom.relation].types if atom.relation != CLOCK else ()
        named = [a for a, t in zip(atom.args, types, strict=False) if t == "time"]
        named += [a.args[0] for a in atom.annotations if a.name == "time" and a.args]
        out.update(a.name for a in named if isinstance(a, ast.Var))
    return out


def _shown(expr: ast.Expr, kind: str, times: set[str]) -> str:
    name = KIND_NAMES.get(kind, f"a {kind}")  # an unknown declared type is reported elsewhere
    if not isinstance(expr, ast.Var):
        return name
    return f"{'a time' if expr.name in times else name} (`{expr.name}`)"


def check_kinds(rule: ast.Rule, catalog: Catalog) -> Iterator[Diagnostic]:
    """Warnings at comparisons and arithmetic whose operands' kinds never fit together."""
    env, times = variable_types(rule, _declared(catalog)), _times(rule, catalog)
    exprs = [*rule.guards, *(d.expr for d in rule.defs), *rule.head.args]
    exprs += [a for ann in rule.head.annotations for a in ann.args]
    for top in exprs:
        for e in ast.walk_expr(top):
            if not isinstance(e, ast.BinOp):
                continue
            left, right = expr_type(e.left, env), expr_type(e.right, env)
            if left is None or right is None:
                continue
            a, b = _shown(e.left, left, times), _shown(e.right, right, times)
            if e.op in ast.COMPARISONS and _family(left) != _family(right):
                yield Diagnostic(
                    f"this compares {a} with {b}, which never holds: the rule cannot match",
                    e.span,
                    "a boolean compares only with `true` or `false`"
                    if "bool" in (left, right)
                    else 'compare numbers with numbers (30.0, not "30") and text with text '
                    "(str(x) is the text of a number)",
                    Severity.WARNING,
                )
            elif e.op not in ast.COMPARISONS and not {left, right} <= _NUMERIC:
                yield Diagnostic(
                    f"`{e.op}` of {a} and {b} has no value, so the rule cannot match",
                    e.span,
                    "arithmetic takes numbers; concat(a, b) joins text",
                    Severity.WARNING,
                )
    yield from _check_summaries(rule, env, catalog)


def summarised_kinds(function: str) -> tuple[frozenset[str], str]:
    """The types of values an aggregate takes, and how to say them: a sum or an average
    numbers, a least or greatest numbers or text (a count takes no value)."""
    if function in ("min", "max"):
        return _NUMERIC | {"str"}, "numbers or text"
    return _NUMERIC, "numbers"


def _check_summaries(
    rule: ast.Rule, env: Mapping[str, str], catalog: Catalog
) -> Iterator[Diagnostic]:
    """A body aggregate's values must be ones its function takes: numbers for a sum or an
    average; numbers or text for a least or greatest."""
    for lit in rule.body_aggregates:
        agg = lit.aggregation
        if agg is None or agg.arg is None:
            continue
        local = dict(env)
        _bind(lit.atom, local, _declared(catalog), lambda _: {})
        found = expr_type(agg.arg, local)
        allowed, what = summarised_kinds(agg.function)
        if found is not None and found not in allowed:
            yield Diagnostic(
                f"`{agg.function}` takes {what}, but `{render_expr(agg.arg)}` is "
                f"{KIND_NAMES.get(found, found)}",
                agg.arg.span,
                "summarise a numeric attribute, or count the events with `count`",
            )
