"""Properties of the front end on generated input."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_pomo.lang import CorpusError, PomoSyntaxError, Program, compile_corpus, parse, render
from dagster_pomo.lang.parser import POMOLOGIC
from dagster_pomo.lang.pomologic import render_pomologic
from dagster_pomo.lang.stratify import precedence_edges
from tests.strategies import corpora, dependency_programs, pomologic_corpora

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(corpora)
def test_render_then_parse_gives_the_same_tree(corpus) -> None:
    text = render(corpus)
    assert parse(text) == corpus, text


@settings(PROPERTY, max_examples=100)  # a PomoLogic corpus is slow to generate
@given(pomologic_corpora)
def test_pomologic_render_then_parse_gives_the_same_tree(corpus) -> None:
    text = render_pomologic(corpus)
    assert parse(text, notation=POMOLOGIC) == corpus, text


@PROPERTY
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_the_projects_syntax_error(data: bytes) -> None:
    try:
        parse(data)
    except PomoSyntaxError as exc:
        assert exc.diagnostics and all(d.span.line >= 1 for d in exc.diagnostics)


# Text made of the language's own characters reaches far deeper into the parser
# than random bytes do; each notation its own.
_corpus_like = st.text(alphabet=list('pqx_(),;:=^!@~."#/\n 01-+*<>if where decl'), max_size=120)
_pomologic_like = st.text(alphabet=list('pqXY_(),.:-=!@~"#/\n 01+*<>decl'), max_size=120)


@PROPERTY
@given(
    st.one_of(
        st.tuples(st.one_of(_corpus_like, st.text(max_size=80)), st.just("fuzz.pomo")),
        st.tuples(st.one_of(_pomologic_like, st.text(max_size=80)), st.just("fuzz.pomologic")),
    )
)
def test_arbitrary_text_raises_only_corpus_errors(case: tuple[str, str]) -> None:
    text, name = case
    try:
        compile_corpus(text, name)
    except CorpusError as exc:
        rendered = exc.render()
        assert rendered.startswith(f"{name}:")
        assert "^" in rendered


def _reaches(edges: set[tuple[str, str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        for a, b in edges:
            if a == node and b not in seen:
                seen.add(b)
                todo.append(b)
    return False


def assert_order_respects_dependencies(program: Program) -> None:
    """Each body relation is computed before its head, or in the same recursive stratum
    when the dependency is positive; `@next` rules come last."""
    stratum_of = {}
    for stratum in program.strata:
        if not stratum.inductive:
            for rel in stratum.relations:
                stratum_of[rel] = stratum.index
    for edge in precedence_edges(program.corpus):
        head, body = stratum_of[edge.head], stratum_of.get(edge.body, -1)
        if edge.negative:
            assert body < head, (edge.head, edge.body)
        else:
            assert body <= head, (edge.head, edge.body)
            if body == head:
                assert program.strata[head].recursive
    inductive = [s for s in program.strata if s.inductive]
    assert len(inductive) <= 1
    if inductive:
        assert inductive[0] is program.strata[-1]
        assert all(r.is_inductive for r in inductive[0].rules)


@settings(max_examples=400, deadline=None)
@given(dependency_programs())
def test_stratification_accepts_exactly_the_stratifiable_programs(text: str) -> None:
    edges = []
    for line in text.splitlines():
        head = re.match(r"(\w+)\(x\)( @next)?", line)
        assert head
        if head.group(2):
            continue
        aggregate = "@count" in line
        body = line.split(":=", 1)[1]
        for neg, rel in re.findall(r"(!?)(\w+)\(x\)", body):
            edges.append((head.group(1), rel, bool(neg) or aggregate))
    graph = {(a, b) for a, b, _ in edges}
    stratifiable = not any(neg and _reaches(graph, b, a) for a, b, neg in edges)
    try:
        program = compile_corpus(text, "gen.pomo")
    except CorpusError as exc:
        assert not stratifiable, exc.render()
        assert all("cannot stratify" in d.message for d in exc.errors)
        return
    assert stratifiable, text
    assert_order_respects_dependencies(program)
