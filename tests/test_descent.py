"""The hand-written reader of the corpus notation against lark's reading of the grammar.

Where the reader gives a statement, it must be the one lark gives, spans included (every
error message and `pomo explain` points with them); where lark refuses a statement, the
reader must not give one. Checked on every corpus in the repository, on generated corpora,
on random expression text and on mutated examples."""

from __future__ import annotations

import random
import re
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_pomo.lang import ast, parse, render
from dagster_pomo.lang.descent import Declined, Invalid, read_statement
from dagster_pomo.lang.errors import SHOWN, PomoSyntaxError
from dagster_pomo.lang.parser import POMO, POMOLOGIC, Notation, lark_statement, split_statements
from dagster_pomo.lang.pomologic import render_pomologic
from dagster_pomo.lang.source import Source, Span
from tests.conftest import GOLDEN, RULES
from tests.strategies import corpora, pomologic_corpora
from tests.test_hostile_corpora import _mutate

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Generating a corpus costs more than reading it twice: fewer of them, the same reach as
# the round-trip tests of test_language_properties.py.
CORPORA = settings(PROPERTY, max_examples=100)


def _spelled(node: Any) -> Any:
    """``node`` as nested tuples, spans included (the AST's equality leaves them out)."""
    if isinstance(node, Span):
        return ("span", node.start, node.end, node.line, node.column)
    if is_dataclass(node):
        return (type(node).__name__, *(_spelled(getattr(node, f.name)) for f in fields(node)))
    if isinstance(node, tuple):
        return tuple(_spelled(item) for item in node)
    return (type(node).__name__, node)  # 1 and 1.0 and True stay apart


def _both(text: str, notation: Notation = POMO) -> list[tuple[str, Any, Any]]:
    """Each statement of ``text``: the reader's outcome and lark's, spelled out."""
    source = Source("x.pomo", text)
    outcomes = []
    for start, end in split_statements(text, notation):
        try:
            ours: Any = _spelled(read_statement(source, start, end, notation is POMOLOGIC))
        except Invalid:
            ours = "invalid"
        except Declined:
            ours = "declined"
        try:
            theirs: Any = _spelled(lark_statement(source, start, end, notation))
        except Exception:  # noqa: BLE001 - lark's reading refuses it: that is all we ask here
            theirs = "refused"
        outcomes.append((text[start:end], ours, theirs))
    return outcomes


def _agree(text: str, notation: Notation = POMO) -> tuple[int, int]:
    """Assert the reader never contradicts lark on ``text``; how many statements it read
    and how many it left to lark."""
    read = declined = 0
    for statement, ours, theirs in _both(text, notation):
        if ours == "declined":
            declined += 1
        elif ours == "invalid":
            assert theirs == "refused", f"the reader refused what lark reads: {statement!r}"
            declined += 1
        else:
            assert ours == theirs, f"the readings differ on {statement!r}"
            read += 1
    return read, declined


NOTATIONS = {".pomo": POMO, ".pomologic": POMOLOGIC}


def test_every_corpus_in_the_repository_reads_as_lark_reads_it() -> None:
    files = [p for p in [*RULES.rglob("*"), *GOLDEN.rglob("*")] if p.suffix in NOTATIONS]
    assert len(files) > 60
    for path in files:
        _agree(path.read_text(errors="replace"), NOTATIONS[path.suffix])
    # Only what needs lark's words (the golden files are mostly errors), escapes and
    # content IDs in PomoLogic (`C := p(X)`) go to lark: the examples are read here.
    for path in [p for p in RULES.rglob("*") if p.suffix in NOTATIONS]:
        for statement, ours, _ in _both(path.read_text(), NOTATIONS[path.suffix]):
            assert ours not in ("declined", "invalid") or "\\" in statement, statement


def _agree_on_generated(text: str, notation: Notation) -> None:
    for statement, ours, theirs in _both(text, notation):
        assert theirs != "refused", statement
        if ours == "declined":
            assert "\\" in statement or ":= " in statement, f"declined: {statement!r}"
        else:
            assert ours == theirs, statement


@CORPORA
@given(corpora)
def test_generated_corpora_read_as_lark_reads_them(corpus: ast.Corpus) -> None:
    _agree_on_generated(render(corpus), POMO)


@CORPORA
@given(pomologic_corpora)
def test_generated_pomologic_reads_as_lark_reads_it(corpus: ast.Corpus) -> None:
    _agree_on_generated(render_pomologic(corpus), POMOLOGIC)


_READ = ["x", "y", "_", "true", "false", "1", "0", "2.5", "1e3", "10m", "3ms", '"a"', "f()",
         "x1", "1.5e-3", '""']  # fmt: skip
_LEFT = ['"\\n"', "99999999999999999999", "if", "choose", "lifetime", "1x", "."]  # to lark
_LEAVES = st.sampled_from(_READ * 12 + _LEFT)
_GAP = st.sampled_from(["", " ", "  ", "\n", " # note\n", "\t", " // c\n"])


def _arithmetic(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, _GAP, st.sampled_from(["+", "-", "*", "/", "%"]), _GAP, children),
        st.tuples(st.just("-"), _GAP, children),
        st.tuples(st.just("("), _GAP, children, _GAP, st.just(")")),
        st.tuples(
            st.sampled_from(["abs(", "max("]), children, st.just(", "), children, st.just(")")
        ),
    ).map("".join)


_SUMS = st.recursive(_LEAVES, _arithmetic, max_leaves=10)
_EXPRESSIONS = st.one_of(
    _SUMS,
    st.tuples(_SUMS, _GAP, st.sampled_from(["<", "==", ">=", "!="]), _GAP, _SUMS).map("".join),
)


_MORE = st.sampled_from(["", " < 1"] * 3 + [" < 1 < 2"])


@PROPERTY
@given(st.lists(_EXPRESSIONS, min_size=4, max_size=4), _SUMS, _GAP, _MORE)
def test_expressions_read_as_lark_reads_them(e: list[str], s: str, gap: str, more: str) -> None:
    """Parentheses, minus signs, layout and comments anywhere in an expression: the spans
    of what is built on a parenthesised expression take in its parentheses."""
    text = (
        f".check r(x{gap}, {e[0]}) := a(x, {e[1]})@t({e[2]}) ~ h{gap}^ !b({e[3]}{more}) ^ "
        f"n = sum ({s}) : c(x) ^ choose((x), (n)) if ({e[0]}) == ({e[2]}) where y = {s};"
    )
    _agree(text)


def _upper(text: str) -> str:
    return re.sub(r"\b(x|y|x1)\b", lambda m: m.group().upper(), text)


@PROPERTY
@given(st.lists(_EXPRESSIONS, min_size=4, max_size=4), _SUMS, _GAP, _MORE)
def test_pomologic_expressions_read_as_lark_reads_them(
    e: list[str], s: str, gap: str, more: str
) -> None:
    e, s = [_upper(x) for x in e], _upper(s)
    text = (
        f".check r(X{gap}, {e[0]}) :- a(X, {e[1]})@t({e[2]}) ~ h{gap}, !b({e[3]}{more}), "
        f"N := sum {s} : c(X), choose((X), (N)), ({e[0]}) == ({e[2]}), Y = {s}, {e[3]}."
    )
    _agree(text, POMOLOGIC)


def test_mutated_examples_never_read_otherwise_than_lark_reads_them() -> None:
    rng = random.Random(62)
    files = sorted(p for p in RULES.rglob("*") if p.suffix in NOTATIONS)
    read = declined = 0
    for _ in range(400):
        path = rng.choice(files)
        r, d = _agree(_mutate(path.read_text(), rng), NOTATIONS[path.suffix])
        read, declined = read + r, declined + d
    assert read > 10 * declined, (read, declined)


def test_past_the_errors_shown_the_rest_are_counted_where_they_are(tmp_path: Path) -> None:
    text = "".join(f"r{i}(x) := a(x) ^;\n" for i in range(SHOWN + 50))
    try:
        parse(text, "bad.pomo")
    except PomoSyntaxError as exc:
        assert len(exc.diagnostics) == SHOWN + 50
        first, last = exc.diagnostics[0], exc.diagnostics[-1]
        assert "expected" in first.message, "the errors shown have lark's words"
        assert (last.span.line, last.message) == (SHOWN + 50, "unexpected `;`")
        assert "... and 50 more errors not shown" in exc.render()
    else:
        raise AssertionError("the corpus has errors")


def test_a_relation_whose_name_starts_with_choose_is_a_relation() -> None:
    corpus = parse("p(x) := chooser(x) ^ choose_one(x) ^ choose((x), (y)) ^ b(y);")
    rule = corpus.rules[0]
    assert [lit.atom.relation for lit in rule.body] == ["chooser", "choose_one", "b"]
    assert len(rule.choices) == 1


def test_a_large_valid_corpus_is_read_without_lark(monkeypatch) -> None:  # noqa: ANN001
    """What makes `pomo check` of 100,000 rules take seconds: no statement of a valid
    corpus in either notation reaches lark (0.2 ms a statement); only errors and what the
    reader declines do."""
    from dagster_pomo.lang import parser

    def refuse(*args: object) -> None:
        raise AssertionError("lark read a statement the reader should have")

    monkeypatch.setattr(parser, "lark_statement", refuse)
    n = 5_000
    pomo = "".join(
        f"r{i}(x, n) := a(x) ^ !b(x) ^ n = count : c(x, _) if x > {i};\n" for i in range(n)
    )
    assert len(parse(pomo, "big.pomo").statements) == n
    logic = "".join(
        f"r{i}(X, N) :- a(X), !b(X), N := count : c(X, _), X > {i}.\n" for i in range(n)
    )
    assert len(parse(logic, "big.pomologic").statements) == n
