"""AST to PomoLogic text, and a checked corpus rewritten in PomoLogic.

``render_pomologic`` is the inverse of the PomoLogic parser (up to spans and layout),
as ``render`` is of the corpus notation's: the property tests check both.
``to_pomologic`` writes a checked program the way PomoLogic is written: variables
with an uppercase first letter, attributes by name (a body atom leaves out those it
does not constrain), constraints and definitions as body predicates, comments kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from dagster_pomo.lang import ast
from dagster_pomo.lang.render import (
    render_aggregation,
    render_atom,
    render_choice,
    render_decl,
    render_expr,
)

if TYPE_CHECKING:  # the program module imports the parser, which this module's users need
    from dagster_pomo.lang.program import Program

_ARROW = " :-\n    "


def _render_body_atom(lit: ast.BodyLiteral) -> str:
    """``!atom``, ``atom``, or ``C := atom`` for an atom whose last annotation binds its
    content ID (the parser puts ``C :=`` there)."""
    atom = lit.atom
    if lit.aggregation is not None:
        agg = lit.aggregation
        return f"{agg.var.name} := {render_aggregation(agg)} : {render_atom(atom)}"
    last = atom.annotations[-1] if atom.annotations else None
    if not lit.negated and last is not None and last.name == "cid":
        if len(last.args) == 1 and isinstance(last.args[0], ast.Var):
            rest = replace(atom, annotations=atom.annotations[:-1])
            return f"{last.args[0].name} := {render_atom(rest)}"
    return ("!" if lit.negated else "") + render_atom(atom)


def render_rule(rule: ast.Rule) -> str:
    body = [_render_body_atom(lit) for lit in rule.body]
    body += [render_choice(c) for c in rule.choices]
    body += [render_expr(g) for g in rule.guards]
    body += [f"{d.var.name} = {render_expr(d.expr)}" for d in rule.defs]
    head = (".check " if rule.check else "") + render_atom(rule.head)
    return (head + _ARROW + ",\n    ".join(body) if body else head) + "."


def render_statement(statement: ast.Statement) -> str:
    if isinstance(statement, ast.Decl):
        return render_decl(statement, ".")
    return render_rule(statement)


def render_pomologic(corpus: ast.Corpus) -> str:
    return "".join(render_statement(s) + "\n" for s in corpus.statements)


# --------------------------------------------------------------------------- conversion


def to_pomologic(program: Program) -> str:
    """``program`` in PomoLogic notation, each statement after its comments."""
    columns = {rel.name: rel.columns for rel in program.catalog}
    named = {
        rel.name
        for rel in program.catalog
        if rel.decl is not None or rel.name in dict(program.corpus.attributes) or not rel.arity
    } | {"clock"}
    out: list[str] = []
    statements = program.corpus.statements
    if statements:  # the file's opening comments, down to the first statement's own
        lines = program.source.text.splitlines()[: statements[0].span.line - 1]
        out += [line.rstrip() for line in lines if not line.strip() or line.lstrip()[0] in "#/"]
        while out and not out[-1]:
            out.pop()
    for i, statement in enumerate(statements):
        comment = program.doc_comment(statement) if i else ""
        if comment:
            if out:
                out.append("")
            out += [f"# {line}".rstrip() for line in comment.splitlines()]
        if isinstance(statement, ast.Rule):
            statement = _rule(statement, columns, named)
        out.append(render_statement(statement))
    return "\n".join(out) + "\n"


def _rule(rule: ast.Rule, columns: dict[str, tuple[str, ...]], named: set[str]) -> ast.Rule:
    rename = _variable_names(rule)

    def expr(e: ast.Expr) -> ast.Expr:
        if isinstance(e, ast.Var):
            return replace(e, name=rename[e.name])
        if isinstance(e, ast.BinOp):
            return replace(e, left=expr(e.left), right=expr(e.right))
        if isinstance(e, ast.Neg):
            return replace(e, operand=expr(e.operand))
        if isinstance(e, ast.Call):
            return replace(e, args=tuple(expr(a) for a in e.args))
        return e

    def atom(a: ast.Atom, whole: bool) -> ast.Atom:
        anns = tuple(replace(n, args=tuple(expr(x) for x in n.args)) for n in a.annotations)
        args = tuple(expr(x) for x in a.args)
        if a.relation not in named:
            return replace(a, args=args, annotations=anns)
        pairs = [
            (name, arg)
            for name, arg in zip(columns[a.relation], args, strict=True)
            if whole or not isinstance(arg, ast.Wildcard)
        ]
        return replace(
            a,
            args=tuple(x for _, x in pairs),
            names=tuple(n for n, _ in pairs),
            annotations=anns,
        )

    return replace(
        rule,
        head=atom(rule.head, not rule.is_subscription),
        body=tuple(_literal(lit, atom(lit.atom, False), expr) for lit in rule.body),
        guards=tuple(expr(g) for g in rule.guards),
        choices=tuple(
            replace(
                c,
                keys=tuple(replace(v, name=rename[v.name]) for v in c.keys),
                values=tuple(replace(v, name=rename[v.name]) for v in c.values),
            )
            for c in rule.choices
        ),
        defs=tuple(
            replace(d, var=replace(d.var, name=rename[d.var.name]), expr=expr(d.expr))
            for d in rule.defs
        ),
    )


def _literal(
    lit: ast.BodyLiteral, atom: ast.Atom, expr: Callable[[ast.Expr], ast.Expr]
) -> ast.BodyLiteral:
    """``lit`` over ``atom``, its aggregate's variable and argument renamed by ``expr``."""
    agg = lit.aggregation
    if agg is None:
        return replace(lit, atom=atom)
    var = expr(agg.var)
    assert isinstance(var, ast.Var)
    arg = None if agg.arg is None else expr(agg.arg)
    return replace(lit, atom=atom, aggregation=replace(agg, var=var, arg=arg))


def _variable_names(rule: ast.Rule) -> dict[str, str]:
    """Each variable of ``rule`` and its PomoLogic name: the first letter uppercased
    (``_``-prefixed ones stay), kept apart from the rule's other names."""
    found: list[str] = []
    for lit in rule.body:
        if lit.aggregation is not None:
            found.append(lit.aggregation.var.name)
            if lit.aggregation.arg is not None:
                found += [v.name for v in ast.expr_vars(lit.aggregation.arg)]
    for atom in (rule.head, *(lit.atom for lit in rule.body)):
        exprs = [*atom.args, *(x for ann in atom.annotations for x in ann.args)]
        found += [v.name for e in exprs for v in ast.expr_vars(e)]
    found += [v.name for g in rule.guards for v in ast.expr_vars(g)]
    found += [v.name for c in rule.choices for v in (*c.keys, *c.values)]
    for d in rule.defs:
        found += [d.var.name, *(v.name for v in ast.expr_vars(d.expr))]
    taken = {n for n in found if n[0].isupper() or n[0] == "_"}
    rename: dict[str, str] = {}
    for name in dict.fromkeys(found):
        if name[0].isupper() or name[0] == "_":
            rename[name] = name
            continue
        new = "".join(part[:1].upper() + part[1:] for part in name.split("_"))
        while new in taken:
            new += "_"
        taken.add(new)
        rename[name] = new
    return rename
