"""Stratification: the order in which relations can be computed.

Precedence graph (an edge from each rule head to each body relation, negative
for negation and for every body atom of an aggregating rule), strongly
connected components, topological order, then one last stratum with every
``@next`` rule. A negative edge inside a component cannot be stratified.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dagster_pomo.lang import ast
from dagster_pomo.lang.errors import Diagnostic


@dataclass(frozen=True)
class Edge:
    head: str
    body: str
    negative: bool
    rule: ast.Rule
    literal: ast.BodyLiteral


@dataclass(frozen=True)
class Stratum:
    """Relations computed together: a fixpoint when ``recursive``; all ``@next`` rules when
    ``inductive``."""

    index: int
    relations: tuple[str, ...]
    rules: tuple[ast.Rule, ...]
    recursive: bool
    inductive: bool = False


def precedence_edges(corpus: ast.Corpus) -> list[Edge]:
    """Edges of deductive rules only: ``@next`` rules are ordered by time, not by strata."""
    edges: list[Edge] = []
    for rule in corpus.rules:
        if rule.is_inductive or not rule.body:
            continue
        # A head aggregate or a choice reads every match: its inputs complete first.
        aggregating = bool(rule.aggregates) or bool(rule.choices)
        for lit in rule.body:
            negative = lit.negated or aggregating or lit.aggregation is not None
            edges.append(Edge(rule.head.relation, lit.atom.relation, negative, rule, lit))
    return edges


def strongly_connected(nodes: list[str], succ: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm without recursion; components come out sinks first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            children = succ.get(node, [])
            if i < len(children):
                work.append((node, i + 1))
                child = children[i]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            if work and work[-1][0] != node:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def stratify(corpus: ast.Corpus) -> tuple[list[Stratum], list[Diagnostic]]:
    """Strata in evaluation order, and an error for each rule that breaks stratification."""
    edges = precedence_edges(corpus)
    order: dict[str, int] = {}  # first appearance, for stable output
    for rule in corpus.rules:
        for atom in (rule.head, *(lit.atom for lit in rule.body)):
            order.setdefault(atom.relation, len(order))
    succ: dict[str, list[str]] = {}
    for e in edges:
        if e.body not in succ.setdefault(e.head, []):
            succ[e.head].append(e.body)
    nodes = sorted(order, key=order.__getitem__)
    components = strongly_connected(nodes, succ)
    component_of = {n: i for i, comp in enumerate(components) for n in comp}

    problems = _negative_cycles(edges, component_of, succ)

    # Tarjan yields dependencies before dependants; re-order ties by source position.
    derived_rules: dict[str, list[ast.Rule]] = {}
    for rule in corpus.rules:
        if not rule.is_inductive and not rule.is_subscription:
            derived_rules.setdefault(rule.head.relation, []).append(rule)
    has_body = {r.head.relation for r in corpus.rules if r.body and not r.is_inductive}
    comp_deps: dict[int, set[int]] = {i: set() for i in range(len(components))}
    for e in edges:
        a, b = component_of[e.head], component_of[e.body]
        if a != b:
            comp_deps[a].add(b)
    first = [min(order[n] for n in component) for component in components]
    ready = sorted((i for i, deps in comp_deps.items() if not deps), key=first.__getitem__)
    dependants: dict[int, list[int]] = {i: [] for i in comp_deps}
    for a, deps in comp_deps.items():
        for b in deps:
            dependants[b].append(a)
    remaining = {i: len(deps) for i, deps in comp_deps.items()}
    strata: list[Stratum] = []
    queue = deque(ready)
    while queue:
        i = queue.popleft()
        members = sorted(components[i], key=order.__getitem__)
        if any(m in has_body for m in members):
            # One relation's rules are in source order already.
            rules = (
                derived_rules[members[0]]
                if len(members) == 1
                else sorted(
                    (r for m in members for r in derived_rules.get(m, [])),
                    key=lambda r: r.span.start,
                )
            )
            recursive = len(members) > 1 or members[0] in succ.get(members[0], ())
            strata.append(Stratum(len(strata), tuple(members), tuple(rules), recursive))
            if recursive:
                problems += _recursive_body_aggregates(rules, set(members))
        freed = []
        for j in dependants[i]:
            remaining[j] -= 1
            if remaining[j] == 0:
                freed.append(j)
        queue.extend(sorted(freed, key=first.__getitem__))
    inductive = tuple(r for r in corpus.rules if r.is_inductive)
    if inductive:
        heads = tuple(dict.fromkeys(r.head.relation for r in inductive))
        strata.append(Stratum(len(strata), heads, inductive, recursive=False, inductive=True))
    return strata, problems


def _recursive_body_aggregates(
    rules: Iterable[ast.Rule], members: set[str]
) -> Iterator[Diagnostic]:
    """Body aggregates and choices in the rules of a recursive stratum: not supported yet
    (one over the stratum's own relations is a cycle through aggregation, reported as
    such)."""
    for rule in rules:
        for choice in rule.choices:
            if not any(lit.atom.relation in members for lit in rule.body):
                yield Diagnostic(
                    "`choose` in a recursive rule is not supported yet",
                    choice.span,
                    f"derive `{rule.head.relation}`'s recursive part in a rule of its own, "
                    "and choose in a rule that reads it",
                )
        for lit in rule.body_aggregates:
            if lit.atom.relation in members:
                continue
            yield Diagnostic(
                "a body aggregate in a recursive rule is not supported yet",
                lit.span,
                f"derive `{rule.head.relation}`'s recursive part in a rule of its own, and "
                "aggregate in a rule that reads it",
            )


def _negative_cycles(
    edges: list[Edge], component_of: dict[str, int], succ: dict[str, list[str]]
) -> list[Diagnostic]:
    problems: list[Diagnostic] = []
    reported: set[int] = set()
    for e in edges:
        if not e.negative or component_of[e.head] != component_of[e.body]:
            continue
        if id(e.rule) in reported:
            continue
        reported.add(id(e.rule))
        cycle = " -> ".join([e.head, *_path(e.body, e.head, succ, component_of)])
        if e.literal.negated:
            how, span = "negation", e.literal.span
        elif e.literal.aggregation is not None:
            how, span = f"a body aggregate (`{e.literal.aggregation.function}`)", e.literal.span
        elif e.rule.choices and not e.rule.aggregates:
            how, span = "`choose`", e.rule.choices[0].span
        else:
            how = f"aggregation (`@{e.rule.aggregates[0].name}`)"
            span = e.rule.aggregates[0].span
        problems.append(
            Diagnostic(
                f"cannot stratify: `{e.head}` depends on `{e.body}` through {how} "
                f"inside the recursive cycle {cycle}",
                span,
                "negation and aggregation cannot feed back into their own inputs; break the "
                "cycle, or make the rule `@next` so it reads the previous epoch",
            )
        )
    return problems


def _path(start: str, goal: str, succ: dict[str, list[str]], comp: dict[str, int]) -> list[str]:
    """Shortest path ``start -> ... -> goal`` inside one component (BFS)."""
    parent: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            break
        for nxt in succ.get(node, []):
            if nxt not in parent and comp[nxt] == comp[start]:
                parent[nxt] = node
                queue.append(nxt)
    path: list[str] = []
    node: str | None = goal
    while node is not None:
        path.append(node)
        node = parent[node]
    return path[::-1]
