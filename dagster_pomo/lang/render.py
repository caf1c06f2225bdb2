"""AST to canonical text: the inverse of the parser (up to spans and layout).

``parse(render(corpus)) == corpus`` holds for every tree the parser can build;
the property tests check it. Parentheses are added only where precedence needs
them, durations use the largest unit that divides them exactly.
"""

from __future__ import annotations

import json
import math

from dagster_pomo.lang import ast

_PRECEDENCE = {op: 1 for op in ast.COMPARISONS} | {"+": 2, "-": 2, "*": 3, "/": 3, "%": 3}
_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1))


def render_const(const: ast.Const) -> str:
    value = const.value
    if const.kind == "bool":
        return "true" if value else "false"
    if const.kind == "str":
        return json.dumps(value, ensure_ascii=False)
    if const.kind == "float":
        assert isinstance(value, float) and math.isfinite(value)
        text = repr(value)
        return text if any(c in text for c in ".e") else text + ".0"
    if const.kind == "duration":
        assert isinstance(value, int)
        sign, magnitude = ("-", -value) if value < 0 else ("", value)
        if magnitude == 0:
            return "0ms"
        unit, size = next((u, s) for u, s in _UNITS if magnitude % s == 0)
        return f"{sign}{magnitude // size}{unit}"
    return str(value)


def render_expr(expr: ast.Expr, context: int = 0) -> str:
    """``expr`` as text; ``context`` is the precedence of the operator around it."""
    if isinstance(expr, ast.Const):
        return render_const(expr)
    if isinstance(expr, ast.Var):
        return expr.name
    if isinstance(expr, ast.Wildcard):
        return "_"
    if isinstance(expr, ast.Call):
        return f"{expr.func}({', '.join(render_expr(a) for a in expr.args)})"
    if isinstance(expr, ast.Neg):
        return "-" + render_expr(expr.operand, 4)
    prec = _PRECEDENCE[expr.op]
    # Left-associative: the right operand needs parentheses at equal precedence;
    # comparisons do not chain, so both sides need them.
    left_ctx = prec + 1 if prec == 1 else prec
    text = f"{render_expr(expr.left, left_ctx)} {expr.op} {render_expr(expr.right, prec + 1)}"
    return f"({text})" if prec < context else text


def aggregate_key(ann: ast.Annotation) -> str:
    """How an aggregate is named in outputs: as written, without ``@`` and spaces; a
    lattice's by its name (``@lattice("flags", b)`` is ``flags(b)``)."""
    if not ann.args:
        return ann.name
    if ann.lattice is not None and ann.value is not None:
        return f"{ann.lattice}({render_expr(ann.value)})".replace(" ", "")
    return f"{ann.name}({','.join(render_expr(a) for a in ann.args)})".replace(" ", "")


def render_atom(atom: ast.Atom) -> str:
    """``rel(args)`` (``rel(name: arg, ...)`` while attributes are named) and its suffixes."""
    if atom.names is None:
        inside = ", ".join(render_expr(a) for a in atom.args)
    else:
        pairs = zip(atom.names, atom.args, strict=True)
        inside = ", ".join(f"{n}: {render_expr(a)}" for n, a in pairs)
    text = f"{atom.relation}({inside})"
    for ann in atom.annotations:
        text += f" @{ann.name}"
        if ann.args:
            text += f"({', '.join(render_expr(a) for a in ann.args)})"
    for handler in atom.handlers:
        text += f" ~ {handler.name}"
    return text


def render_aggregation(aggregation: ast.Aggregation) -> str:
    """``count``, ``sum x`` or ``sum (x * y)``: a body aggregate's function and argument
    (anything but a variable in parentheses, as both notations read it)."""
    arg = aggregation.arg
    if arg is None:
        return aggregation.function
    text = render_expr(arg)
    return f"{aggregation.function} {text if isinstance(arg, ast.Var) else f'({text})'}"


def _render_literal(lit: ast.BodyLiteral) -> str:
    if lit.aggregation is not None:
        agg = lit.aggregation
        return f"{agg.var.name} = {render_aggregation(agg)} : {render_atom(lit.atom)}"
    return ("!" if lit.negated else "") + render_atom(lit.atom)


def render_choice(choice: ast.Choice) -> str:
    keys = ", ".join(v.name for v in choice.keys)
    values = ", ".join(v.name for v in choice.values)
    return f"choose(({keys}), ({values}))"


def render_rule(rule: ast.Rule) -> str:
    text = (".check " if rule.check else "") + render_atom(rule.head)
    if rule.body:
        parts = [_render_literal(lit) for lit in rule.body]
        lits = " ^ ".join([*parts, *(render_choice(c) for c in rule.choices)])
        text += f" := {lits}"
        if rule.guards:
            text += " if " + " ^ ".join(render_expr(g) for g in rule.guards)
    if rule.defs:
        text += " where " + ", ".join(f"{d.var.name} = {render_expr(d.expr)}" for d in rule.defs)
    return text + ";"


def render_decl(decl: ast.Decl, end: str = ";") -> str:
    """A declaration, ended by ``end`` (PomoLogic's is ``.``)."""
    cols = ", ".join(f"{c.name}: {c.type}" for c in decl.columns)
    text = f".decl {decl.relation}({cols})"
    if decl.lifetime is not None:
        text += " lifetime " + render_const(ast.Const(decl.lifetime, "duration"))
    return text + end


def render(corpus: ast.Corpus) -> str:
    return "".join(
        (render_decl(s) if isinstance(s, ast.Decl) else render_rule(s)) + "\n"
        for s in corpus.statements
    )
