"""The ``@next`` safety rule (PomoLogic §2.1): an inductive rule either carries its head
over unchanged (the head atom is in its body with the same arguments) or needs a
positive *instantaneous* atom, so that without new input it stops deriving new state.
An ``@async`` rule needs the instantaneous atom: a message that re-sends itself would be
delivered in every epoch for ever.

A relation is *state* when an ``@next`` rule derives it, or when every rule deriving it
matches state only; everything else (inputs, facts, the clock, what is derived from
them) is instantaneous. ``counter(n + 1) @next := counter(n);`` is refused: it would
change in every epoch for ever.
"""

from __future__ import annotations

from dagster_pomo.lang import ast
from dagster_pomo.lang.errors import Diagnostic


def state_relations(corpus: ast.Corpus) -> frozenset[str]:
    """The relations whose events come from ``@next`` and ``@async`` rules alone (through any
    chain of ordinary rules over them)."""
    rules = [r for r in corpus.rules if r.body]
    state = {r.head.relation for r in rules if r.is_inductive}
    changed = True
    while changed:
        changed = False
        for head in {r.head.relation for r in rules} - state:
            deriving = [r for r in corpus.rules if r.head.relation == head]
            if all(r.body and all(a.relation in state for a in r.positive) for r in deriving):
                state.add(head)
                changed = True
    return frozenset(state)


def check_inductive(corpus: ast.Corpus) -> list[Diagnostic]:
    """An error on each ``@next`` rule that neither carries its head over nor matches an
    instantaneous event."""
    state = state_relations(corpus)
    found = []
    for rule in corpus.rules:
        if not rule.is_inductive or not rule.body:
            continue
        carried = not rule.is_async and any(
            atom.relation == rule.head.relation and atom.args == rule.head.args
            for atom in rule.positive
        )
        if carried or any(atom.relation not in state for atom in rule.positive):
            continue
        matches = (
            "only state carried by `@next` and `@async` rules"
            if rule.positive
            else "no event (only `!`)"
        )
        if rule.is_async:
            message = (
                f"this `@async` rule would send `{rule.head.relation}` in every epoch for "
                f"ever: its body matches {matches}"
            )
            hint = "match an input event in the body (something that happens)"
        else:
            message = (
                f"this `@next` rule would change `{rule.head.relation}` in every epoch for "
                f"ever: its body matches {matches}, and its head is not in its body with "
                "the same arguments"
            )
            hint = (
                "match an input event in the body (something that happens), or carry the "
                "head over unchanged"
            )
        found.append(Diagnostic(message, rule.head.span, hint))
    return found
