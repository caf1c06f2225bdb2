"""The relations of a corpus: names, arities, columns, types, lifetimes, roles.

Built from ``.decl`` statements and from every use of every relation, with the
checks that need the whole corpus: duplicate or malformed declarations, arity
consistency, and constants of the wrong type for a declared column.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass

from dagster_pomo.lang import ast
from dagster_pomo.lang.check import CLOCK
from dagster_pomo.lang.errors import Diagnostic, Severity

AGGREGATE_NAMES = frozenset(ast.HEAD_AGGREGATES)
# Which constant kinds each declared column type accepts.
ACCEPTS: dict[str, frozenset[str]] = {
    "int": frozenset({"int", "duration"}),
    "float": frozenset({"int", "float", "duration"}),
    "str": frozenset({"str"}),
    "bool": frozenset({"bool"}),
    "time": frozenset({"int", "duration"}),
    "cid": frozenset({"str"}),
}
KIND_NAMES = {
    "int": "an integer",
    "float": "a float",
    "str": "a string",
    "bool": "a boolean",
    "duration": "a duration",
}


@dataclass(frozen=True)
class Relation:
    """What the corpus says about one relation."""

    name: str
    arity: int
    columns: tuple[str, ...]
    types: tuple[str | None, ...]  # None: not declared, inferred later from use or data
    lifetime: int | None  # milliseconds; None means events never expire
    decl: ast.Decl | None
    derived: bool  # some rule with a body derives it
    inductive: bool  # some `@next` rule derives it
    handlers: tuple[str, ...]  # action handlers subscribed to its events
    aggregates: tuple[ast.Annotation, ...] = ()  # as written in the head of its one rule
    check: str | None = None  # "error" or "warn": a `.check` relation, its events violations
    # Its versions carry the input events they rest on: a rule deriving it says
    # `@provenance`, or it is read by a positive atom of a rule of such a relation.
    provenance: bool = False

    @property
    def is_input(self) -> bool:
        """Events of this relation arrive from outside (landing files, facts)."""
        return not self.derived and not self.inductive and self.name != CLOCK

    @property
    def aggregate_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.aggregates)


@dataclass(frozen=True)
class Catalog:
    relations: dict[str, Relation]

    def __getitem__(self, name: str) -> Relation:
        return self.relations[name]

    def __contains__(self, name: object) -> bool:
        return name in self.relations

    def __iter__(self) -> Iterator[Relation]:
        return iter(self.relations.values())

    @property
    def inputs(self) -> list[Relation]:
        return [r for r in self if r.is_input]


def first_use(corpus: ast.Corpus, relation: str) -> ast.Atom:
    """The first atom naming ``relation``, in source order (where to point about it)."""
    return next(a for r in corpus.rules for a in r.atoms if a.relation == relation)


def build_catalog(corpus: ast.Corpus) -> tuple[Catalog, list[Diagnostic]]:
    """The relation table, and every declaration, arity and constant-type problem."""
    found: list[Diagnostic] = []
    decls: dict[str, ast.Decl] = {}
    for decl in corpus.decls:
        found += _check_decl(decl, decls.get(decl.relation))
        decls.setdefault(decl.relation, decl)

    arity: dict[str, tuple[int, ast.Atom | ast.Decl]] = {
        name: (len(d.columns), d) for name, d in decls.items()
    }
    arity[CLOCK] = (2, ast.Decl(CLOCK, ()))
    for rule in corpus.rules:
        for atom in rule.atoms:
            known = arity.setdefault(atom.relation, (len(atom.args), atom))
            if known[0] != len(atom.args):
                found.append(_arity_error(atom, *known))
            elif (decl := decls.get(atom.relation)) is not None:
                found += _check_constant_types(atom, decl)

    aggregates, agg_problems = _aggregates(corpus)
    found += agg_problems
    checks, check_problems = _checks(corpus)
    found += check_problems
    derived = {r.head.relation for r in corpus.rules if r.body and not r.is_inductive}
    inductive = {r.head.relation for r in corpus.rules if r.is_inductive}
    handlers: dict[str, list[str]] = {}
    for rule in corpus.rules:
        for h in rule.head.handlers:
            names = handlers.setdefault(rule.head.relation, [])
            if h.name not in names:
                names.append(h.name)
    carrying = provenance_carriers(corpus, derived | inductive)
    relations: dict[str, Relation] = {}
    attributes = dict(corpus.attributes)
    for name, (n, _) in arity.items():
        if name == CLOCK and not any(a.relation == CLOCK for r in corpus.rules for a in r.atoms):
            continue
        decl = decls.get(name)
        named = attributes.get(name)
        if decl:
            columns = tuple(c.name for c in decl.columns)
        elif named is not None and len(named) == n:
            columns = named
        else:
            columns = tuple(f"c{i}" for i in range(n))
        types = tuple(c.type for c in decl.columns) if decl else (None,) * n
        if name == CLOCK:
            columns, types = ("offset", "period"), ("int", "int")
        relations[name] = Relation(
            name=name,
            arity=n,
            columns=columns,
            types=types,
            lifetime=decl.lifetime if decl else None,
            decl=decl,
            derived=name in derived,
            inductive=name in inductive,
            handlers=tuple(handlers.get(name, ())),
            aggregates=aggregates.get(name, ()),
            check=checks.get(name),
            provenance=name in carrying,
        )
    catalog = Catalog(relations)
    return catalog, [*found, *_check_implicit_inputs(corpus, catalog)]


def provenance_carriers(corpus: ast.Corpus, made: set[str]) -> set[str]:
    """The relations whose versions carry provenance: those a rule with `@provenance` derives,
    and, to a fixpoint, the relations of ``made`` (derived by rules) that a positive atom of
    a carrier's rule reads. Negations, body aggregates and the clock are conditions, not
    sources; an input relation is its own source and needs no column."""
    carrying = {r.head.relation for r in corpus.rules if r.head.annotation("provenance")}
    changed = True
    while changed:
        changed = False
        for rule in corpus.rules:
            if rule.head.relation not in carrying:
                continue
            for atom in rule.positive:
                if atom.relation in made and atom.relation not in carrying:
                    carrying.add(atom.relation)
                    changed = True
    return carrying


def _checks(corpus: ast.Corpus) -> tuple[dict[str, str], list[Diagnostic]]:
    """Each `.check` relation's severity; an error where a relation is derived both by
    `.check` rules and otherwise, or by `.check` rules of both severities."""
    severity: dict[str, tuple[str, ast.Rule]] = {}
    for rule in corpus.rules:
        if rule.check_severity is not None:
            severity.setdefault(rule.head.relation, (rule.check_severity, rule))
    found: list[Diagnostic] = []
    for rule in corpus.rules:
        first = severity.get(rule.head.relation)
        if first is None or rule is first[1] or rule.is_subscription:
            continue
        if rule.check_severity != first[0]:
            what = "`.check @warn`" if first[0] == "warn" else "`.check`"
            found.append(
                Diagnostic(
                    f"`{rule.head.relation}` is a {what} relation (line {first[1].span.line}): "
                    "every rule that derives it must be one too",
                    rule.head.name_span,
                    "a relation holds violations or events, not both: name one anew",
                )
            )
    return {name: sev for name, (sev, _) in severity.items()}, found


_AGGREGATE_HINT = (
    "to aggregate in a body, write `n = {0} x : atom(..., x)` (PomoLogic `N := {0} X : atom(...)`)"
)
# Names people write for a construct, read as relations: what to write instead.
CONSTRUCTS = {
    "choice": "write a choice as a body predicate: `choose((key), (value))`",
    "count": "to count in a body, write `n = count : atom(...)` (PomoLogic `N := count : "
    "atom(...)`)",
    **{fn: _AGGREGATE_HINT.format(fn) for fn in ("sum", "min", "max", "average")},
    "successor": "time is not a relation: `@next` and `@async` heads land in the next epoch",
    "time": "an event's time is `atom(...) @time(t)`",
    "not": "negate an atom with `!atom(...)`",
}


def _check_implicit_inputs(corpus: ast.Corpus, catalog: Catalog) -> Iterator[Diagnostic]:
    """A warning where an undeclared relation that no rule derives (so an input, read from
    the landing files) is named like another relation: most likely a misspelling, which
    would otherwise make the rule wait for events that never come."""
    for rel in catalog:
        if not rel.is_input or rel.decl is not None:
            continue
        first = first_use(corpus, rel.name)
        construct = CONSTRUCTS.get(rel.name)
        if construct is not None:
            yield Diagnostic(
                f"`{rel.name}` is no construct of the language here: it is an undeclared "
                "input relation, read from the landing files, so this rule waits for its "
                "events",
                first.name_span,
                construct,
                Severity.WARNING,
            )
            continue
        others = [r.name for r in catalog if r.name != rel.name and r.name != CLOCK]
        close = difflib.get_close_matches(rel.name, others, n=1, cutoff=0.8)
        if not close:
            continue
        yield Diagnostic(
            f"`{rel.name}` is not declared and no rule derives it, so it is an input read "
            "from the landing files",
            first.name_span,
            f"did you mean `{close[0]}`? If `{rel.name}` is an input, declare it with `.decl`",
            Severity.WARNING,
        )


def _aggregates(
    corpus: ast.Corpus,
) -> tuple[dict[str, tuple[ast.Annotation, ...]], list[Diagnostic]]:
    """Which aggregates each relation carries; body references must name one of them."""
    found: list[Diagnostic] = []
    owner: dict[str, ast.Rule] = {}
    for rule in corpus.rules:
        head = rule.head.relation
        if rule.aggregates or (head in owner and owner[head].aggregates):
            first = owner.get(head)
            if first is not None and first is not rule and rule.body:
                found.append(
                    Diagnostic(
                        f"`{head}` aggregates, so it must be derived by exactly one rule, "
                        f"but line {first.span.line} derives it too",
                        rule.head.name_span,
                        "derive the union into a helper relation, then aggregate that in one rule",
                    )
                )
                continue
            seen: set[str] = set()
            for agg in rule.aggregates:
                if agg.name in seen:
                    found.append(
                        Diagnostic(
                            f"`{head}` has `@{agg.name}` twice",
                            agg.span,
                            "a relation carries at most one aggregate of each kind; "
                            "derive a second relation for the other",
                        )
                    )
                seen.add(agg.name)
        if rule.body:
            owner.setdefault(head, rule)
    carried = {name: rule.aggregates for name, rule in owner.items() if rule.aggregates}
    for rule in corpus.rules:
        for lit in rule.body:
            have = {a.name for a in carried.get(lit.atom.relation, ())}
            for ann in lit.atom.annotations:
                if ann.name in AGGREGATE_NAMES and ann.name not in have:
                    listed = ", ".join(f"@{n}" for n in sorted(have))
                    found.append(
                        Diagnostic(
                            f"`{lit.atom.relation}` carries no `@{ann.name}`",
                            ann.span,
                            f"it carries {listed}"
                            if have
                            else "only relations derived by an aggregating rule carry aggregates",
                        )
                    )
    return carried, found


def _check_decl(decl: ast.Decl, earlier: ast.Decl | None) -> Iterator[Diagnostic]:
    if decl.relation == CLOCK:
        yield Diagnostic(
            "`clock` is built in and cannot be declared",
            decl.name_span,
            "its columns are fixed: `clock(offset, period)`",
        )
    if earlier is not None:
        yield Diagnostic(
            f"`{decl.relation}` is declared twice",
            decl.name_span,
            f"the first `.decl` is at line {earlier.span.line}; keep one",
        )
    seen: set[str] = set()
    for col in decl.columns:
        if col.name in seen:
            yield Diagnostic(
                f"column `{col.name}` appears twice in `{decl.relation}`",
                col.span,
                "give each column its own name",
            )
        seen.add(col.name)
        if col.type not in ACCEPTS:
            close = difflib.get_close_matches(col.type, list(ACCEPTS), n=1)
            yield Diagnostic(
                f"unknown type `{col.type}` for column `{col.name}`",
                col.span,
                f"did you mean `{close[0]}`?"
                if close
                else "types are int, float, str, bool, time, cid",
            )


def _arity_error(atom: ast.Atom, want: int, where: ast.Atom | ast.Decl) -> Diagnostic:
    if isinstance(where, ast.Decl):
        if atom.relation == CLOCK:
            origin = "`clock(offset, period)` takes"
        else:
            origin = f"its `.decl` at line {where.span.line} has"
    else:
        origin = f"its first use at line {where.span.line} has"
    got = len(atom.args)
    return Diagnostic(
        f"`{atom.relation}` is used with {got} argument{'s' if got != 1 else ''} here, "
        f"but {origin} {want}",
        atom.name_span,
        "every use of a relation must have the same number of arguments",
    )


def _check_constant_types(atom: ast.Atom, decl: ast.Decl) -> Iterator[Diagnostic]:
    for arg, col in zip(atom.args, decl.columns, strict=False):
        if isinstance(arg, ast.Const) and col.type in ACCEPTS:
            if arg.kind not in ACCEPTS[col.type]:
                yield Diagnostic(
                    f"column `{col.name}` of `{decl.relation}` is {col.type}, "
                    f"but this is {KIND_NAMES[arg.kind]}",
                    arg.span,
                    f"see the `.decl` at line {decl.span.line}",
                )
