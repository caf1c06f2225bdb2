"""Named attributes to positions: ``point(y: Y)`` becomes ``point(_, Y)``.

An atom may name its attributes (PomoLogic writes every atom so; the corpus notation
allows it too). A declared relation's attributes are its ``.decl`` columns; an
undeclared one's are the attribute names its atoms use, in order of first use. An
omitted attribute matches anything (``_``), except in the head of a rule or a fact,
which must give every attribute. After this pass every atom is positional, so no later
pass knows names were used.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import replace

from dagster_pomo.lang import ast
from dagster_pomo.lang.check import CLOCK, suggest
from dagster_pomo.lang.errors import Diagnostic

CLOCK_COLUMNS = ("offset", "period")


def declared_attributes(corpus: ast.Corpus) -> dict[str, tuple[str, ...]]:
    """The attributes of every declared relation (its first ``.decl``), and the clock's."""
    declared: dict[str, tuple[str, ...]] = {CLOCK: CLOCK_COLUMNS}
    for decl in corpus.decls:
        declared.setdefault(decl.relation, tuple(c.name for c in decl.columns))
    return declared


def used_attributes(corpus: ast.Corpus, declared: Container[str]) -> dict[str, tuple[str, ...]]:
    """The attributes of every undeclared relation an atom names attributes of: the names
    used, in order of first use."""
    inferred: dict[str, list[str]] = {}
    for rule in corpus.rules:
        for atom in rule.atoms:
            if atom.names is None or atom.relation in declared:
                continue
            names = inferred.setdefault(atom.relation, [])
            names += [n for n in atom.names if n not in names]
    return {name: tuple(names) for name, names in inferred.items()}


def resolve_attributes(corpus: ast.Corpus) -> tuple[ast.Corpus, list[Diagnostic]]:
    """``corpus`` with every atom positional, and what is wrong with the names used. A
    rule whose head lacks attributes is said once and left out of the later checks."""
    declared = declared_attributes(corpus)
    used = used_attributes(corpus, declared)
    columns = declared | used
    found: list[Diagnostic] = []
    statements: list[ast.Statement] = []
    for statement in corpus.statements:
        if isinstance(statement, ast.Rule):
            resolved = _resolve_rule(statement, columns, declared, found)
            if resolved is None:
                continue
            statement = resolved
        statements.append(statement)
    return ast.Corpus(tuple(statements), corpus.source, tuple(used.items())), found


def _resolve_rule(
    rule: ast.Rule,
    columns: dict[str, tuple[str, ...]],
    declared: Container[str],
    found: list[Diagnostic],
) -> ast.Rule | None:
    """``rule`` with positional atoms, or None when its head lacks attributes (a head
    that derives events gives every one; a subscription's pattern need not)."""
    if all(atom.names is None for atom in rule.atoms):
        return rule  # every atom positional already: most rules, and cheap to tell
    head, missing = _resolve(rule.head, columns, declared, found)
    if missing and not rule.is_subscription:
        found.append(
            Diagnostic(
                f"`{rule.head.relation}` is derived here without "
                + ", ".join(f"`{k}`" for k in missing)
                + ": a head or a fact gives every attribute",
                rule.head.name_span,
                "give " + ", ".join(f"`{k}: ...`" for k in missing),
            )
        )
        return None
    body = tuple(
        replace(lit, atom=_resolve(lit.atom, columns, declared, found)[0]) for lit in rule.body
    )
    return replace(rule, head=head, body=body)


def _resolve(
    atom: ast.Atom,
    columns: dict[str, tuple[str, ...]],
    declared: Container[str],
    found: list[Diagnostic],
) -> tuple[ast.Atom, list[str]]:
    """``atom`` with its arguments in column order (an omitted attribute is ``_``), and
    the attributes it omits."""
    if atom.names is None:
        return atom, []
    known = columns[atom.relation]
    given: dict[str, ast.Expr] = {}
    spans = atom.name_spans or (atom.span,) * len(atom.names)
    for name, expr, span in zip(atom.names, atom.args, spans, strict=True):
        if name in given:
            found.append(
                Diagnostic(
                    f"attribute `{name}` of `{atom.relation}` is given twice",
                    span,
                    "give each attribute once",
                )
            )
        elif name not in known:
            origin = "declared" if atom.relation in declared else "used"
            found.append(
                Diagnostic(
                    f"`{atom.relation}` has no attribute `{name}`; its {origin} attributes "
                    f"are {', '.join(f'`{k}`' for k in known) or 'none'}",
                    span,
                    suggest(name, known) or "name one of them",
                )
            )
        given.setdefault(name, expr)
    args = tuple(given.get(k, ast.Wildcard(atom.span)) for k in known)
    missing = [k for k in known if k not in given]
    return replace(atom, args=args, names=None, name_spans=()), missing
