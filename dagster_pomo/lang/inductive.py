"""The ``@next`` safety rule (PomoLogic §2.1), as warnings: an inductive rule that matches
no positive *instantaneous* atom keeps going without new input. Where its head takes its
values from the state it matches, that is a queue draining or state carried forward
(accepted: seed 002's queue is such a rule); where it computes a value or matches nothing,
it may change in every epoch for ever, and `pomo check` warns.

A relation is *state* when an ``@next`` rule derives it, or when every rule deriving it
matches state only; everything else (inputs, facts, the clock, what is derived from
them) is instantaneous. ``counter(n + 1) @next := counter(n);`` is warned about: it makes
a new value in every epoch for ever.
"""

from __future__ import annotations

from dagster_pomo.lang import ast
from dagster_pomo.lang.errors import Diagnostic, Severity


def state_relations(corpus: ast.Corpus) -> frozenset[str]:
    """The relations whose events come from ``@next`` and ``@async`` rules alone (through any
    chain of ordinary rules over them)."""
    deriving: dict[str, list[ast.Rule]] = {}
    for rule in corpus.rules:
        deriving.setdefault(rule.head.relation, []).append(rule)
    state = {r.head.relation for r in corpus.rules if r.body and r.is_inductive}
    readers: dict[str, set[str]] = {}  # relation -> the heads of rules that match it
    for rule in corpus.rules:
        for atom in rule.positive:
            readers.setdefault(atom.relation, set()).add(rule.head.relation)
    # A head joins the state once every rule deriving it matches state only; look again
    # only at the heads of rules that read a relation just found to be state.
    waiting = [h for h in deriving if h not in state]
    while waiting:
        head = waiting.pop()
        rules = deriving[head]
        if head in state or not all(
            r.body and all(a.relation in state for a in r.positive) for r in rules
        ):
            continue
        state.add(head)
        waiting.extend(h for h in readers.get(head, ()) if h not in state)
    return frozenset(state)


def _drawn_from_body(rule: ast.Rule) -> bool:
    """Whether each argument of ``rule``'s head is a constant or a variable that a positive
    atom's argument binds: the head takes only values its body's events hold, so over a
    finite state it makes no new value (the seed's queue: ``p(A, B, C) @next :=
    m(A, B, C) ^ omin(A, C)``). A computed value (``n + 1``), a ``where`` definition or an
    event's time (``@time(t)``) may be new in every epoch."""
    bound = {arg.name for atom in rule.positive for arg in atom.args if isinstance(arg, ast.Var)}
    return all(
        isinstance(arg, ast.Const) or (isinstance(arg, ast.Var) and arg.name in bound)
        for arg in rule.head.args
    )


def check_inductive(corpus: ast.Corpus) -> list[Diagnostic]:
    """A warning on each ``@next`` or ``@async`` rule that matches no instantaneous event
    (nothing that happens) and either matches no event at all (only ``!``) or computes a
    head value (it may make a new one in every epoch for ever, with no input). A rule over
    state whose head takes its values from its body is accepted: it changes only as the
    state it reads does (the seed's queue drains), and what it carries forward is bounded
    by that state."""
    state = state_relations(corpus)
    found = []
    for rule in corpus.rules:
        if not rule.is_inductive or not rule.body:
            continue
        if any(atom.relation not in state for atom in rule.positive):
            continue
        if rule.positive and _drawn_from_body(rule):
            continue
        kind, verb = ("@async", "send") if rule.is_async else ("@next", "change")
        head = rule.head.relation
        if not rule.positive:
            message = (
                f"this `{kind}` rule matches no event (only `!`): it may {verb} `{head}` in "
                "every epoch for ever, with no input"
            )
        else:
            message = (
                f"this `{kind}` rule matches only state carried by `@next` and `@async` rules "
                f"and computes its head: it may {verb} `{head}` to a new value in every epoch "
                "for ever, with no input"
            )
        hint = (
            "match an input event in the body (something that happens), or take the head's "
            "values from the body's events"
        )
        found.append(Diagnostic(message, rule.head.span, hint, Severity.WARNING))
    return found
