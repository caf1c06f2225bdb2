"""The example corpora and the source documents' examples, written in this syntax."""

from __future__ import annotations

import json
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
    assert [s.relations for s in program.strata] == [
        ("level_per_minute",),
        ("high_minute",),
        ("was_high",),
        ("overflow_alert",),
    ]


def test_a_fact_may_compute_its_constants_in_where() -> None:
    program = compile_corpus('threshold(t, v) where t = "north", v = 2 * 45;')
    assert program.catalog["threshold"].is_input and not program.strata


def test_the_readme_example_alerts_once_per_crossing(tmp_path: Path) -> None:
    """The README's corpus on three hours of generated readings: an alert at each high
    minute of a tank that follows five that were not, unless the tank is being worked on."""
    from dagster_pomo.engine.run import run
    from dagster_pomo.examples import CAPACITY, DEFAULT_START, HOUR, water_tank_events

    corpus = tmp_path / "readme.pomo"
    corpus.write_text((ROOT / "README.md").read_text().split("```")[1])
    landing = tmp_path / "landing"
    landing.mkdir()
    water_tank_events(landing / "tanks.jsonl", 9_000, tanks=3, hours=3)
    facts = [
        {"relation": "capacity", "t": DEFAULT_START, "args": [n, c]} for n, c in CAPACITY.items()
    ]
    (landing / "capacity.jsonl").write_text("".join(json.dumps(f) + "\n" for f in facts))
    program = load_program(corpus)
    result = run(program, landing, HOUR, DEFAULT_START, DEFAULT_START + 3 * HOUR, engine="local")
    high = {(v.args[0], v.t) for v in result.events("high_minute")}
    lines = [json.loads(x) for x in (landing / "tanks.jsonl").read_text().splitlines()]
    worked_on = {x["args"]["tank"]: x["t"] for x in lines if x["relation"] == "maintenance"}
    minute = 60_000
    crossings = {
        (tank, m)
        for tank, m in high
        if not any((tank, m - k * minute) in high for k in range(1, 6))
        and not worked_on.get(tank, m + 1) <= m
    }
    alerts = {(v.args[0], v.t) for v in result.events("overflow_alert")}
    assert alerts == crossings and 0 < len(alerts) < len(high) / 5
