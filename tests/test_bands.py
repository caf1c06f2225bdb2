"""Which guards keep two variables within a constant band: the engine joins atoms that share
no variable on buckets of that band, so a band that is too narrow would lose matches."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dagster_pomo.lang import compile_corpus
from dagster_pomo.plan.band_joins import Band, bands


def _guards(text: str):  # noqa: ANN202
    """The guards (typed, as the plan holds them) and constants of the one rule of a corpus."""
    from dagster_pomo.plan.constant_defs import constant_values
    from dagster_pomo.plan.exprs import lower
    from dagster_pomo.plan.schema import infer_schemas, rule_env

    program = compile_corpus(text, "case.pomo")
    (rule,) = program.corpus.rules
    types = rule_env(rule, infer_schemas(program, {}))
    return [lower(g, types) for g in rule.guards], constant_values(rule)


def test_the_clock_resampling_guards_give_one_period_below_the_tick() -> None:
    guards, constants = _guards(
        """.decl level(x: float);
        m() @average(x) := level(x) @time(seen) ^ clock(o, p) @time(tick)
            if seen < tick ^ seen >= tick - p where o = 0, p = 1m;"""
    )
    assert bands(guards, constants) == [Band("seen", "tick", -60_000, 0)]


def test_bounds_written_either_way_round_meet_in_one_band() -> None:
    guards, constants = _guards(
        """.decl a(x: int);
        .decl b(y: int);
        n(x, y) := a(x) ^ b(y) if y + 5 > x ^ -(x) + y >= -7 ^ x >= y - 9 ^ x - y <= 2 + 3;"""
    )
    # x - y < 5, x - y <= 7, x - y >= -9, x - y <= 5: the tightest ends win, named as the
    # first guard names them (y - x > -5).
    assert bands(guards, constants) == [Band("y", "x", -5, 9)]


@pytest.mark.parametrize(
    "guards",
    [
        "x < y + 5",  # one end only
        "x < y + 5 ^ x * 2 > y",  # not a difference of the two
        "x < y + 5 ^ x > y - z",  # a third variable
        "x < y + 5.5 ^ x > y",  # not an integer
        "x != y + 1 ^ x > y",  # not an order
    ],
)
def test_guards_that_do_not_close_a_band_give_none(guards: str) -> None:
    found, constants = _guards(
        f""".decl a(x: int, z: int);
        .decl b(y: int);
        n(x, y) := a(x, z) ^ b(y) if {guards};"""
    )
    assert bands(found, constants) == []


@given(
    low=st.integers(-50, 50),
    size=st.integers(0, 60),
    x=st.integers(-200, 200),
    y=st.integers(-200, 200),
)
def test_a_pair_the_guards_keep_always_shares_a_bucket(low: int, size: int, x: int, y: int) -> None:
    """What the Spark join pairs: x's bucket and y's bucket plus each offset."""
    width, first, last = Band("x", "y", low, low + size).buckets()
    if low <= x - y <= low + size:
        assert first <= x // width - y // width <= last
    assert last - first <= 2, "a band spans at most three buckets"
