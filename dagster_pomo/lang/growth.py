"""Warnings about rules whose work can grow past what anyone meant: a join of atoms that
share nothing (every event of one paired with every event of the other), and a recursive
rule that computes a new value from its own relation with no guard to stop it (one more
value every round, for ever). Both compile and run; `pomo check` says so, with a hint.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from dagster_pomo.lang import ast
from dagster_pomo.lang.check import CLOCK
from dagster_pomo.lang.errors import Diagnostic, Severity
from dagster_pomo.lang.stratify import Stratum


def _names(exprs: Iterable[ast.Expr]) -> set[str]:
    return {v.name for e in exprs for v in ast.expr_vars(e)}


def _atom_names(atom: ast.Atom) -> set[str]:
    """The variables an atom mentions: its arguments' and its annotations' (``@time(t)``,
    an aggregate it reads)."""
    return _names([*atom.args, *(a for ann in atom.annotations for a in ann.args)])


def check_cross_products(corpus: ast.Corpus) -> Iterator[Diagnostic]:
    """A warning on each rule whose positive atoms fall apart into groups that no shared
    variable or guard relates: a cross product. Atoms with no variable
    (filters such as ``enabled()``) and clocks take no part."""
    for rule in corpus.rules:
        # A clock has one tick alive at a time: pairing with it is no cross product.
        atoms = [(atom, _atom_names(atom)) for atom in rule.positive if atom.relation != CLOCK]
        atoms = [(atom, names) for atom, names in atoms if names]
        if len(atoms) < 2:
            continue
        # A guard relates the atoms its variables come from (through `where` definitions);
        # a definition alone filters nothing: `z = x + y` is made for every pair.
        defined = _defined(rule)
        links = [
            set().union(*({v} | defined.get(v, set()) for v in _names([g]))) for g in rule.guards
        ]
        # Variables one atom or one guard mentions are related; atoms whose variables are
        # related, transitively, are joined.
        root: dict[str, str] = {}
        for names in [*(names for _, names in atoms), *links]:
            _relate(root, names)
        groups: dict[str, list[ast.Atom]] = {}
        for atom, names in atoms:
            groups.setdefault(_root(root, next(iter(names))), []).append(atom)
        if len(groups) < 2:
            continue
        firsts = sorted((g[0] for g in groups.values()), key=lambda a: a.span.start)
        a, b = firsts[0], firsts[1]
        yield Diagnostic(
            f"`{a.relation}` and `{b.relation}` share no variable, and no guard relates "
            f"them: each `{a.relation}` event is paired with each `{b.relation}` "
            "event (a cross product)",
            b.span,
            "join them on a variable they share, or relate them in a guard (`if x < y`); if "
            "every pairing is meant, leave it",
            Severity.WARNING,
        )


def _root(root: dict[str, str], name: str) -> str:
    """The name standing for ``name``'s related names (``root`` maps each to another)."""
    while root.setdefault(name, name) != name:
        name = root[name]
    return name


def _relate(root: dict[str, str], names: Iterable[str]) -> None:
    """``names`` related to each other in ``root``."""
    first = None
    for name in names:
        if first is None:
            first = _root(root, name)
        else:
            root[_root(root, name)] = first


def _defined(rule: ast.Rule) -> dict[str, set[str]]:
    """Each ``where`` variable's variables, through the definitions it uses."""
    direct = {d.var.name: _names([d.expr]) for d in rule.defs}
    out: dict[str, set[str]] = {}
    for name in direct:
        seen, todo = set(), [name]
        while todo:
            for v in direct.get(todo.pop(), ()):
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
        out[name] = seen
    return out


def check_growth(strata: Iterable[Stratum]) -> Iterator[Diagnostic]:
    """A warning on each head argument of a recursive rule that computes a value (``x + 1``,
    ``concat(s, s)``, a ``where`` definition of such) from a variable its own stratum's
    relations bind, where no guard mentions it: each round may make a new value, and the
    recursion need never end."""
    for stratum in strata:
        if not stratum.recursive:
            continue
        members = set(stratum.relations)
        for rule in stratum.rules:
            own = set().union(*(_atom_names(a) for a in rule.positive if a.relation in members))
            if not own:
                continue
            defined = _defined(rule)
            guarded = _names(rule.guards)
            for arg in rule.head.args:
                if isinstance(arg, ast.Const | ast.Wildcard):
                    continue
                if isinstance(arg, ast.Var) and arg.name not in defined:
                    continue  # a value the body's events hold: no new one
                deps = _names([arg])
                deps |= set().union(*(defined.get(v, set()) | {v} for v in list(deps)))
                if not deps & own or deps & guarded:
                    continue
                yield Diagnostic(
                    f"this argument computes a new value of `{rule.head.relation}` from "
                    f"its own recursion, and no guard bounds it: each round may make "
                    "another, for ever",
                    arg.span,
                    "bound it with a guard (`if x < 1000`), or take the value from an input",
                    Severity.WARNING,
                )
