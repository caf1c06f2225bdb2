"""The example corpora and the source documents' examples, written in this syntax."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_pomo.lang import compile_corpus, load_program
from tests.conftest import ROOT, RULES
from tests.test_language_properties import assert_order_respects_dependencies

EXAMPLES = sorted(RULES.glob("*.pomo"))

SEED_EXAMPLES = {
    "aggregation": "p1(v1, v2) @average(v3) @max(v3) := p2(v1, v2, v3, v4);",
    "time_series": "average_water_level(x) @average(y) := water_level(x, y);",
    "smoothing": """
        water_level_smoothed(tank1) @average(x) @time(tc - period / 2) :=
            water_level(tank1, x) @time(te) ^ clock(offset, period) @time(tc)
            if te < tc ^ te >= tc - period
            where offset = 0, period = 1m;""",
    "projection": "x_coordinate(x) := point(x, _);",
    "zero_point": """
        zero_point(0, y) := point(0, y);
        zero_point(x, 0) := point(x, 0);""",
    "diagonal": "diagonal(x, y) := point(x, y) if x <= y;",
    "meals": """
        suggested_meal(a, b, food) :=
            person(a) ^ person(b) ^ likes(a, food) ^ !dislikes(b, food) if a != b;""",
    "total_stock": "total_stock(category) @sum(quantity) := product(_, category, quantity);",
    "popular": """
        followers(x) @count := follower(_, x);
        popular_profile(x) := profile(x) ^ followers(x) @count(c) if c >= 1000;""",
    "checkbox": """
        checkbox(id, s) @next := checkbox(id, s) ^ !clicks(id);
        checkbox(id, true) @next := checkbox(id, false) ^ clicks(id);
        checkbox(id, false) @next := checkbox(id, true) ^ clicks(id);""",
    "dedalus_sequence": """
        seq(a, x + 1) @next := seq(a, x) ^ event(a);
        seq(a, x) @next := seq(a, x) ^ !event(a);""",
    "min_by_negation": """
        not_min(a, b) := p(a, b) ^ p(a, c) if b > c;
        min_p(a, b) := p(a, b) ^ !not_min(a, b);""",
}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_corpus_is_sound_and_ordered(path: Path) -> None:
    program = load_program(path)
    assert program.warnings == ()
    assert program.strata, "every example derives something"
    assert_order_respects_dependencies(program)


def test_the_examples_cover_what_users_asked_for() -> None:
    programs = {p.stem: load_program(p) for p in EXAMPLES}
    water = programs["water_tanks"]
    assert water.catalog["level_10m"].aggregate_names == ("average", "max")
    assert water.catalog["water_level"].lifetime == 600_000
    assert water.catalog["overflow_alert"].handlers == ("notify_operator",)
    assert any(s.recursive for s in programs["access_control"].strata)
    assert programs["access_control"].catalog["violation"].handlers == ("open_ticket",)
    assert programs["payments_fraud"].catalog["block"].handlers == ("block_card",)
    streaks = programs["login_streaks"]
    assert streaks.strata[-1].inductive
    assert not streaks.catalog["streak"].is_input


@pytest.mark.parametrize("name", sorted(SEED_EXAMPLES))
def test_seed_example_compiles(name: str) -> None:
    program = compile_corpus(SEED_EXAMPLES[name], f"{name}.pomo")
    assert_order_respects_dependencies(program)


def test_checkbox_negates_itself_safely_because_it_is_inductive() -> None:
    program = compile_corpus(SEED_EXAMPLES["checkbox"])
    (stratum,) = program.strata
    assert stratum.inductive and len(stratum.rules) == 3


def test_min_by_negation_puts_not_min_first() -> None:
    program = compile_corpus(SEED_EXAMPLES["min_by_negation"])
    assert [s.relations for s in program.strata] == [("not_min",), ("min_p",)]


def test_recursion_in_one_stratum() -> None:
    program = compile_corpus(
        "reach(x, y) := edge(x, y);\nreach(x, z) := reach(x, y) ^ edge(y, z);\n"
        "even(x, y) := reach(x, y) ^ !odd(x, y);\nodd(x, y) := edge(x, y);\n"
    )
    by_relation = {r: s for s in program.strata for r in s.relations}
    assert by_relation["reach"].recursive and not by_relation["odd"].recursive
    assert by_relation["even"].index > max(by_relation["reach"].index, by_relation["odd"].index)
    assert [r.name for r in program.catalog.inputs] == ["edge"]


def test_warning_for_a_variable_used_once() -> None:
    program = compile_corpus("p(x) := q(x, y);", "w.pomo")
    (warning,) = program.warnings
    assert warning.message == "variable `y` is used only once"
    assert warning.render(program.source).startswith("w.pomo:1:14: warning: ")


def test_the_readme_example_compiles() -> None:
    readme = (ROOT / "README.md").read_text()
    program = compile_corpus(readme.split("```")[1], "README.md")
    assert [s.relations for s in program.strata] == [("level_10m",), ("overflow_alert",)]


def test_a_fact_may_compute_its_constants_in_where() -> None:
    program = compile_corpus('threshold(t, v) where t = "north", v = 2 * 45;')
    assert program.catalog["threshold"].is_input and not program.strata
