"""Checks that look at one rule at a time.

Annotations and handlers in the right places, ``_`` only where it means
"anything", every variable bound before it is used (range restriction), clock
arguments constant, aggregate variables kept apart from head arguments.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dagster_pomo.lang import ast
from dagster_pomo.lang.errors import Diagnostic, Severity
from dagster_pomo.lang.functions import FUNCTIONS, arity_text

CLOCK = "clock"
ANNOTATION_ARITY = {
    "time": 1,
    "cid": 1,
    "next": 0,
    "count": 0,
    "sum": 1,
    "min": 1,
    "max": 1,
    "average": 1,
    "collect": 1,
    "lattice": 2,
    "warn": 0,
    "async": 0,
    "provenance": 0,
}
HEAD_ONLY = ("next", "warn", "async", "provenance")
# In a body every annotation but @next and @warn takes one argument: the value it binds or
# matches (the event's time, or the aggregate the event carries).
BODY_ARITY = {name: 1 for name in ANNOTATION_ARITY if name not in HEAD_ONLY}


def suggest(name: str, choices: Iterable[str]) -> str | None:
    """ "did you mean `x`?" for the choice closest to a misspelt ``name``, if one is close."""
    if len(name) > 100:  # no misspelling of a name people write; and the comparison is quadratic
        return None
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.75)
    return f"did you mean `{close[0]}`?" if close else None


MAX_NAME = 200  # characters of a relation name: it names folders and files (255 bytes at most)


def check_names(corpus: ast.Corpus) -> list[Diagnostic]:
    """Relation names that cannot name the relation's folder in the warehouse or its file of
    ``pomo run --out``: names starting with ``_`` are the project's own files there
    (``_quarantine.jsonl``, ``_staging``, ``_landing.json``), and very long names do not fit
    a file name. Each name is reported once, where it first appears."""
    found: list[Diagnostic] = []
    seen: set[str] = set()
    atoms = [(d.relation, d.name_span) for d in corpus.decls] + [
        (a.relation, a.name_span)
        for rule in corpus.rules
        for a in (rule.head, *(lit.atom for lit in rule.body))
    ]
    for name, span in atoms:
        if name in seen:
            continue
        seen.add(name)
        if name.startswith("_"):
            found.append(
                Diagnostic(
                    f"relation names starting with `_` are reserved: `{name}`",
                    span,
                    f"rename it, e.g. `{name.lstrip('_') or 'r'}`",
                )
            )
        elif len(name) > MAX_NAME:
            found.append(
                Diagnostic(
                    f"a relation name of {len(name)} characters; at most {MAX_NAME}",
                    span,
                    "a relation names a folder of the warehouse: shorten it",
                )
            )
    return found


def check_rules(corpus: ast.Corpus) -> list[Diagnostic]:
    """Every per-rule problem in ``corpus``."""
    found: list[Diagnostic] = []
    for rule in corpus.rules:
        found += check_annotations(rule)
        found += check_wildcards(rule)
        found += check_functions(rule)
        found += check_bindings(rule)
    return found


# --------------------------------------------------------------------------- annotations


def check_annotations(rule: ast.Rule) -> Iterator[Diagnostic]:
    head = rule.head
    for lit in rule.body:
        yield from _check_annotation_names(lit.atom, BODY_ARITY)
        if (collected := lit.atom.annotation("collect")) is not None:
            yield Diagnostic(
                "a collected set cannot be read in a body: no expression takes a set",
                collected.span,
                "match the events it collects instead, or collect into a relation of "
                "its own: `seen(k, x) := ...`",
            )
        cid = lit.atom.annotation("cid")
        if lit.negated and cid is not None:
            yield Diagnostic(
                "a negated atom matches no event, so it has no content ID to bind",
                cid.span,
                "bind the content ID on a positive atom",
            )
        for handler in lit.atom.handlers:
            yield Diagnostic(
                f"`~ {handler.name}` can only follow a rule head or a subscription pattern",
                handler.span,
                f"write `{lit.atom.relation}(...) ~ {handler.name};` as its own statement",
            )
    yield from _check_annotation_names(head, ANNOTATION_ARITY)
    if (cid := head.annotation("cid")) is not None:
        yield Diagnostic(
            "`@cid` binds the content ID of a matched event: it belongs in a body",
            cid.span,
            "give the head a column of type `cid` and bind it in the body (`C := atom`)",
        )
    lattice = head.annotation("lattice")
    if lattice is not None and len(lattice.args) == 2 and lattice.lattice is None:
        yield Diagnostic(
            "`@lattice` names its lattice first, as text",
            lattice.args[0].span,
            'write `@lattice("flags", v)`: the merge function registered under that name',
        )
    if (warn := head.annotation("warn")) is not None and not rule.check:
        yield Diagnostic(
            "`@warn` belongs on the head of a `.check` rule",
            warn.span,
            f"write `.check {head.relation}(...) @warn := ...;` to report violations as warnings",
        )
    if rule.check and not rule.body:
        yield Diagnostic(
            "a `.check` needs a body: it derives a violation from each match",
            head.name_span,
            f"write `.check {head.relation}(...) := <what must never hold>;`",
        )
    if rule.check and rule.is_inductive:
        yield Diagnostic(
            f"a `.check` cannot be an `@{'async' if rule.is_async else 'next'}` rule",
            head.name_span,
            "check the epoch's own events; carry state forward in another relation",
        )
    if head.relation == CLOCK and not rule.is_subscription:
        yield Diagnostic(
            "`clock` is built in: rules cannot derive it",
            head.name_span,
            "use `clock(offset, period)` in a rule body to get periodic events",
        )
    aggregates = rule.aggregates
    next_ann = head.annotation("next")
    if rule.is_subscription:
        for ann in head.annotations:
            yield Diagnostic(
                f"`@{ann.name}` has no meaning on a subscription pattern",
                ann.span,
                "a pattern selects events by its arguments; give it a rule body to derive events",
            )
    elif rule.is_fact:
        for ann in head.annotations:
            if ann.name != "time":
                yield Diagnostic(
                    f"a fact cannot carry `@{ann.name}`",
                    ann.span,
                    "a fact is its own source: it carries its content ID where its relation "
                    "carries provenance (a rule deriving it says `@provenance`)"
                    if ann.name == "provenance"
                    else "a fact is an event at time 0 or at `@time(...)`; it has no body to "
                    "aggregate",
                )
    async_ann = head.annotation("async")
    if next_ann is not None and async_ann is not None:
        yield Diagnostic(
            "a rule is `@next` or `@async`, not both",
            async_ann.span,
            "`@next` carries state to the next epoch; `@async` sends each match there once",
        )
    for kind in (a for a in (next_ann, async_ann) if a is not None):
        time_ann = head.annotation("time")
        if time_ann is not None:
            yield Diagnostic(
                f"an `@{kind.name}` rule cannot set `@time(...)` in its head",
                time_ann.span,
                f"an `@{kind.name}` head is always stamped with the start of the next epoch",
            )
        for agg in aggregates:
            yield Diagnostic(
                f"an `@{kind.name}` rule cannot aggregate (`@{agg.name}`)",
                agg.span,
                f"aggregate in a deductive rule, then carry the result forward with `@{kind.name}`",
            )
        break


def _check_annotation_names(atom: ast.Atom, arity: dict[str, int]) -> Iterator[Diagnostic]:
    seen: set[str] = set()
    for ann in atom.annotations:
        if ann.name in HEAD_ONLY and ann.name not in arity:
            yield Diagnostic(
                f"`@{ann.name}` belongs in a rule head, not in its body",
                ann.span,
                {
                    "next": "`@next` makes the rule's head an event of the next epoch",
                    "async": "`@async` delivers the rule's head at the start of the next epoch",
                    "warn": "`@warn` makes a `.check` rule's violations warnings",
                    "provenance": "`@provenance` makes the head's events carry the input "
                    "events they rest on",
                }[ann.name],
            )
            continue
        if ann.name not in ANNOTATION_ARITY:
            known = ", ".join(f"@{n}" for n in ANNOTATION_ARITY)
            yield Diagnostic(
                f"unknown annotation `@{ann.name}`",
                ann.span,
                suggest(ann.name, ANNOTATION_ARITY) or f"known annotations: {known}",
            )
            continue
        want = arity[ann.name]
        if len(ann.args) != want:
            form = f"`@{ann.name}`" if want == 0 else f"`@{ann.name}(...)`"
            if arity is BODY_ARITY:
                form += " to bind or match the value"
            yield Diagnostic(
                f"`@{ann.name}` takes {want} argument{'s' if want != 1 else ''}, "
                f"not {len(ann.args)}",
                ann.span,
                f"write {form}",
            )
        if ann.name in seen:
            yield Diagnostic(
                f"`@{ann.name}` appears twice on `{atom.relation}`", ann.span, "keep one"
            )
        seen.add(ann.name)


# --------------------------------------------------------------------------- wildcards, functions


def _all_exprs(rule: ast.Rule) -> Iterator[tuple[ast.Expr, bool]]:
    """Every top-level expression of the rule, and whether ``_`` may stand there alone."""
    pattern_ok = rule.is_subscription
    for arg in rule.head.args:
        yield arg, pattern_ok
    for ann in rule.head.annotations:
        for arg in ann.args:
            yield arg, False
    for lit in rule.body:
        for arg in lit.atom.args:
            yield arg, True
        for ann in lit.atom.annotations:
            for arg in ann.args:
                yield arg, True
    for guard in rule.guards:
        yield guard, False
    for d in rule.defs:
        yield d.expr, False
    for lit in rule.body_aggregates:
        if lit.aggregation is not None and lit.aggregation.arg is not None:
            yield lit.aggregation.arg, False


def check_wildcards(rule: ast.Rule) -> Iterator[Diagnostic]:
    for expr, alone_ok in _all_exprs(rule):
        for node in ast.walk_expr(expr):
            if isinstance(node, ast.Wildcard) and not (alone_ok and node is expr):
                yield Diagnostic(
                    "`_` can only stand alone as an argument of a body atom or a pattern",
                    node.span,
                    "`_` matches anything and binds nothing, so it has no value to use here",
                )


def check_functions(rule: ast.Rule) -> Iterator[Diagnostic]:
    for expr, _ in _all_exprs(rule):
        for node in ast.walk_expr(expr):
            if not isinstance(node, ast.Call):
                continue
            fn = FUNCTIONS.get(node.func)
            if fn is None:
                yield Diagnostic(
                    f"unknown function `{node.func}`",
                    node.span,
                    suggest(node.func, FUNCTIONS)
                    or "built-in functions: " + ", ".join(sorted(FUNCTIONS)),
                )
            elif len(node.args) < fn.min_args or (
                fn.max_args is not None and len(node.args) > fn.max_args
            ):
                yield Diagnostic(
                    f"`{fn.name}` takes {arity_text(fn)}, not {len(node.args)}",
                    node.span,
                )


# --------------------------------------------------------------------------- bindings


@dataclass(frozen=True)
class Bindings:
    """Which variables a rule binds, and how."""

    by_atoms: frozenset[str]  # bare variables in positive atoms and their annotations
    by_defs: frozenset[str]  # `where` definitions whose right-hand sides are bound
    constant_defs: frozenset[str]  # `where` definitions that do not depend on the body
    def_order: tuple[ast.Definition, ...] = ()  # resolvable definitions, each after its inputs
    by_aggregates: frozenset[str] = frozenset()  # the results of body aggregates

    @property
    def all(self) -> frozenset[str]:
        return self.by_atoms | self.by_aggregates | self.by_defs

    def group_of(self, atom: ast.Atom) -> tuple[str, ...]:
        """The variables a body aggregate's ``atom`` shares with the positive atoms: its
        groups. Its other variables are its own."""
        return tuple(v for v in atom_variables(atom) if v in self.by_atoms)


def atom_variables(atom: ast.Atom) -> tuple[str, ...]:
    """The bare variables of ``atom``'s arguments and annotations, each once, in order."""
    exprs = (*atom.args, *(a for ann in atom.annotations for a in ann.args))
    return tuple(dict.fromkeys(e.name for e in exprs if isinstance(e, ast.Var)))


def binding_of(rule: ast.Rule) -> Bindings:
    """Resolve ``where`` definitions in dependency order (they may be written in any order)."""
    by_atoms: set[str] = set()
    for atom in rule.positive:
        # A clock's arguments configure it; only its @time binds anything.
        args = () if atom.relation == CLOCK else atom.args
        for arg in (*args, *(a for ann in atom.annotations for a in ann.args)):
            if isinstance(arg, ast.Var):
                by_atoms.add(arg.name)
    by_aggregates = {lit.aggregation.var.name for lit in rule.body_aggregates if lit.aggregation}
    by_aggregates -= by_atoms
    by_defs: set[str] = set()
    constant: set[str] = set()
    order: list[ast.Definition] = []
    pending = [d for d in rule.defs if d.var.name not in by_atoms | by_aggregates]
    progress = True
    while pending and progress:
        progress = False
        for d in list(pending):
            used = {v.name for v in ast.expr_vars(d.expr)}
            if used <= by_atoms | by_aggregates | by_defs:
                by_defs.add(d.var.name)
                order.append(d)
                if used <= constant:
                    constant.add(d.var.name)
                pending.remove(d)
                progress = True
    return Bindings(
        frozenset(by_atoms),
        frozenset(by_defs),
        frozenset(constant),
        tuple(order),
        frozenset(by_aggregates),
    )


def _unbound(expr: ast.Expr, bound: frozenset[str]) -> Iterator[ast.Var]:
    seen: set[str] = set()
    for var in ast.expr_vars(expr):
        if var.name not in bound and var.name not in seen:
            seen.add(var.name)
            yield var


def check_bindings(rule: ast.Rule) -> Iterator[Diagnostic]:
    b = binding_of(rule)
    yield from _check_defs(rule, b)
    # A defined variable whose definition failed is reported once, at the definition.
    bound = b.all | {d.var.name for d in rule.defs}
    if rule.is_subscription:
        yield from _check_pattern(rule.head)
        return
    if rule.is_fact:
        for var in _iter_unbound(rule.head, b.constant_defs):
            yield Diagnostic(
                f"variable `{var.name}` in a fact has no value",
                var.span,
                "a fact holds constants only; define the value with `where "
                f"{var.name} = ...` or give the rule a body with `:=`",
            )
        return
    body_what = "a positive atom of the body, a body `@time(...)` or a `where` definition"
    owned = {
        v: lit.atom.relation
        for lit in rule.body_aggregates
        for v in atom_variables(lit.atom)
        if v not in b.by_atoms
    }
    for arg in rule.head.args:
        for var in _unbound(arg, bound):
            hint = f"bind `{var.name}` in {body_what}"
            if var.name in owned:
                hint = (
                    f"`{var.name}` belongs to the body aggregate over `{owned[var.name]}` "
                    "alone; to group by it, bind it in a positive atom of the body too"
                )
            yield Diagnostic(
                f"variable `{var.name}` in the head is not bound by the body", var.span, hint
            )
    for ann in rule.head.annotations:
        for arg in ann.args:
            for var in _unbound(arg, bound):
                yield Diagnostic(
                    f"variable `{var.name}` in `@{ann.name}` is not bound by the body",
                    var.span,
                    f"bind `{var.name}` in {body_what}",
                )
    for atom in rule.positive:
        for arg in (*atom.args, *(a for ann in atom.annotations for a in ann.args)):
            if not isinstance(arg, ast.Var | ast.Wildcard | ast.Const):
                for var in _unbound(arg, bound):
                    yield Diagnostic(
                        f"variable `{var.name}` is used in an expression before it is bound",
                        var.span,
                        "an expression argument is compared with the event's value, so its "
                        f"variables must be bound elsewhere; bind `{var.name}` by a bare "
                        "variable argument or a `where` definition",
                    )
    for atom in rule.negative:
        for arg in (*atom.args, *(a for ann in atom.annotations for a in ann.args)):
            for var in _unbound(arg, bound):
                yield Diagnostic(
                    f"variable `{var.name}` of a negated atom is not bound",
                    var.span,
                    f"bind `{var.name}` in a positive atom or a `where` definition, "
                    'or write `_` to mean "any value"',
                )
    for guard in rule.guards:
        for var in _unbound(guard, bound):
            yield Diagnostic(
                f"variable `{var.name}` in a guard is not bound",
                var.span,
                f"a guard tests variables but does not bind them; bind `{var.name}` "
                "in a positive atom or a `where` definition",
            )
    yield from _check_clocks(rule, b)
    yield from _check_aggregates(rule)
    yield from _check_body_aggregates(rule, b)
    yield from _check_choices(rule, bound)
    yield from _singletons(rule)


def _iter_unbound(atom: ast.Atom, bound: frozenset[str]) -> Iterator[ast.Var]:
    for arg in (*atom.args, *(a for ann in atom.annotations for a in ann.args)):
        yield from _unbound(arg, bound)


def _check_defs(rule: ast.Rule, b: Bindings) -> Iterator[Diagnostic]:
    seen: dict[str, ast.Definition] = {}
    for d in rule.defs:
        name = d.var.name
        if name in seen:
            yield Diagnostic(
                f"`{name}` is defined twice in `where`",
                d.var.span,
                f"the first definition is at line {seen[name].span.line}; keep one",
            )
            continue
        seen[name] = d
        if name in b.by_atoms | b.by_aggregates:
            yield Diagnostic(
                f"`{name}` is already bound by the body; `where` must introduce a new variable",
                d.var.span,
                f"to compare, write a guard: `if {name} == ...`",
            )
        elif name not in b.all:
            missing = [v for v in _unbound(d.expr, b.all) if v.name != name]
            if not missing:
                yield Diagnostic(
                    f"the definition of `{name}` depends on itself",
                    d.var.span,
                    "`where` definitions may not be circular",
                )
            for var in missing:
                yield Diagnostic(
                    f"variable `{var.name}` in the definition of `{name}` is not bound",
                    var.span,
                    f"bind `{var.name}` in a positive atom of the body or another definition",
                )


def _check_pattern(head: ast.Atom) -> Iterator[Diagnostic]:
    for arg in head.args:
        if not isinstance(arg, ast.Var | ast.Wildcard | ast.Const):
            yield Diagnostic(
                "a subscription pattern takes constants, variables and `_` only",
                arg.span,
                "filter with a rule instead: `matched(...) ~ handler := ... if <condition>;`",
            )


def _check_clocks(rule: ast.Rule, b: Bindings) -> Iterator[Diagnostic]:
    for lit in rule.body:
        atom = lit.atom
        if atom.relation != CLOCK:
            continue
        if lit.negated:
            yield Diagnostic(
                "`clock` cannot be negated",
                lit.span,
                "a clock tick never expires, so `!clock(...)` would never hold",
            )
        for arg, what in zip(atom.args, ("offset", "period"), strict=False):
            constant = all(v.name in b.constant_defs for v in ast.expr_vars(arg))
            if isinstance(arg, ast.Wildcard) or not constant:
                yield Diagnostic(
                    f"the clock {what} must be a constant",
                    arg.span,
                    "write a literal such as `1m`, or a `where` definition of literals",
                )


def _check_aggregates(rule: ast.Rule) -> Iterator[Diagnostic]:
    head_vars = {v.name for arg in rule.head.args for v in ast.expr_vars(arg)}
    for agg in rule.aggregates:
        for arg in agg.args:
            for var in ast.expr_vars(arg):
                if var.name in head_vars:
                    yield Diagnostic(
                        f"`{var.name}` is aggregated by `@{agg.name}` and is also a head argument",
                        var.span,
                        "head arguments form the groups and aggregate variables are summarised "
                        "within a group, so a variable can be one or the other",
                    )


def _check_body_aggregates(rule: ast.Rule, b: Bindings) -> Iterator[Diagnostic]:
    """A body aggregate's result is a new variable; what it summarises belongs to it alone
    (seed 001 §2.5.3); its atom's other variables are its groups, bound elsewhere."""
    claimed: dict[str, ast.BodyLiteral] = {}  # a local variable -> the aggregate it is in
    results: set[str] = set()
    for lit in rule.body_aggregates:
        agg, atom = lit.aggregation, lit.atom
        assert agg is not None
        shown = f"`{agg.var.name} := {agg.function}{'' if agg.arg is None else ' ...'} : ...`"
        if rule.is_inductive:
            yield Diagnostic(
                f"an `@{'async' if rule.is_async else 'next'}` rule cannot aggregate in its body",
                agg.span,
                "aggregate in a deductive rule, then carry the result forward with `@next`",
            )
        for ann in rule.aggregates:
            yield Diagnostic(
                f"a rule with a body aggregate cannot also aggregate in its head (`@{ann.name}`)",
                ann.span,
                "derive the body aggregate's result in a rule of its own, then aggregate that",
            )
        name = agg.var.name
        if name in b.by_atoms or name in results:
            yield Diagnostic(
                f"`{name}` is already bound, so the aggregate cannot bind it",
                agg.var.span,
                f"name the result anew and compare: `N := ..., N == {name}`",
            )
        results.add(name)
        group = set(b.group_of(atom))
        local = [v for v in atom_variables(atom) if v not in group]
        defined = {d.var.name for d in rule.defs} | b.by_aggregates
        for v in local:
            if v in defined:
                yield Diagnostic(
                    f"`{v}` is defined by `where` or by an aggregate, which the atom of a "
                    "body aggregate cannot read",
                    _first_var(atom, v).span,
                    "a body aggregate is grouped by the variables of positive atoms: bind "
                    f"`{v}` in one, or write the constant in the atom",
                )
                continue
            other = claimed.setdefault(v, lit)
            if other is not lit:
                yield Diagnostic(
                    f"`{v}` appears in two body aggregates but in no positive atom",
                    _first_var(atom, v).span,
                    f"bind `{v}` in a positive atom to group both by it, or rename one",
                )
        for arg in atom.args:
            if not isinstance(arg, ast.Var | ast.Wildcard | ast.Const):
                for var in ast.expr_vars(arg):
                    if var.name not in group and var.name not in local:
                        yield Diagnostic(
                            f"variable `{var.name}` in {shown} is not bound by its atom "
                            "or a positive atom",
                            var.span,
                            f"bind `{var.name}` by a bare variable argument of the atom",
                        )
        if agg.arg is None:
            continue
        for var in ast.expr_vars(agg.arg):
            if var.name in group:
                yield Diagnostic(
                    f"`{var.name}` is summarised by {shown}, so it must be otherwise unbound",
                    var.span,
                    f"`{var.name}` is also bound by a positive atom, which makes it a group: "
                    "use another name in the aggregated atom",
                )
            elif var.name not in local:
                yield Diagnostic(
                    f"`{var.name}` is summarised by {shown} but does not appear in its atom",
                    var.span,
                    f"name the attribute it stands for: `{atom.relation}(...: {var.name})`",
                )
            elif sum(isinstance(a, ast.Var) and a.name == var.name for a in atom.args) > 1:
                yield Diagnostic(
                    f"`{var.name}` is summarised by {shown} and appears twice in its atom",
                    var.span,
                    "a summarised variable stands for one attribute: use `_` or another "
                    "variable for the other",
                )


def _check_choices(rule: ast.Rule, bound: frozenset[str] | set[str]) -> Iterator[Diagnostic]:
    """``choose((keys), (values))``: bound variables, each on one side, in a deductive rule
    that does not aggregate in its head."""
    for choice in rule.choices:
        if rule.is_inductive or rule.aggregates:
            what = "an `@next` or `@async` rule" if rule.is_inductive else "an aggregating rule"
            yield Diagnostic(
                f"`choose` is not supported in {what}",
                choice.span,
                "choose in a deductive rule of its own, then read its relation",
            )
        keys = {v.name for v in choice.keys}
        for var in (*choice.keys, *choice.values):
            if var.name not in bound:
                yield Diagnostic(
                    f"variable `{var.name}` in `choose` is not bound",
                    var.span,
                    f"`choose` picks among the matches: bind `{var.name}` in a positive atom",
                )
        for var in choice.values:
            if var.name in keys:
                yield Diagnostic(
                    f"`{var.name}` is both a key and a chosen value of `choose`",
                    var.span,
                    "a value is chosen per key: name it on one side",
                )


def _aggregate_exprs(rule: ast.Rule) -> Iterator[ast.Expr]:
    """The result variable and the argument of each body aggregate."""
    for lit in rule.body_aggregates:
        if lit.aggregation is not None:
            yield lit.aggregation.var
            if lit.aggregation.arg is not None:
                yield lit.aggregation.arg


def _first_var(atom: ast.Atom, name: str) -> ast.Var:
    exprs = (*atom.args, *(a for ann in atom.annotations for a in ann.args))
    return next(e for e in exprs if isinstance(e, ast.Var) and e.name == name)


def _singletons(rule: ast.Rule) -> Iterator[Diagnostic]:
    counts: dict[str, int] = {}
    first: dict[str, ast.Var] = {}
    every = [
        *rule.head.args,
        *(a for ann in rule.head.annotations for a in ann.args),
        *(a for lit in rule.body for a in lit.atom.args),
        *(a for lit in rule.body for ann in lit.atom.annotations for a in ann.args),
        *rule.guards,
        *(d.expr for d in rule.defs),
        *_aggregate_exprs(rule),
        *(v for c in rule.choices for v in (*c.keys, *c.values)),
    ]
    for expr in every:
        for var in ast.expr_vars(expr):
            counts[var.name] = counts.get(var.name, 0) + 1
            first.setdefault(var.name, var)
    for d in rule.defs:
        counts[d.var.name] = counts.get(d.var.name, 0) + 1
    for name, n in counts.items():
        if n == 1 and name in first and not name.startswith("_"):
            yield Diagnostic(
                f"variable `{name}` is used only once",
                first[name].span,
                f"write `_` (or `_{name}`) if any value will do",
                Severity.WARNING,
            )
