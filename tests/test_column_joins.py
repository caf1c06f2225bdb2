"""The local executors' equi-joins pair exactly the rows a join on equal keys pairs, in the
left side's order, with keys compared as Spark compares them (NaN equal to NaN, -0.0 to
0.0), and stop before making more pairs than allowed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_pomo.engine.local.column_joins import (
    TooLarge,
    cross_pairs,
    equal_pairs,
    last_at_or_before,
    pairs_on,
    running_max,
)

FLOATS = st.sampled_from([0.0, -0.0, 1.5, math.nan, -2.0, math.inf])
COLUMNS = {
    "int": st.integers(-3, 3),
    "float": FLOATS,
    "str": st.sampled_from(["", "a", "b", "é", "a\x00"]),
    "set": st.lists(st.integers(0, 2), max_size=2, unique=True).map(sorted),
}


def _column(values: list[object], kind: str) -> np.ndarray:
    """Values as the executors hold them: text and sets (lists) as Python objects."""
    if kind not in ("str", "set"):
        return np.array(values)
    column = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        column[i] = v
    return column


def _same(a: object, b: object) -> bool:
    """Equal as a join's keys are."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _value(column: np.ndarray, i: int) -> object:
    return column[i] if column.dtype == object else column[i].item()


@st.composite
def sides(draw: st.DrawFn) -> tuple[list[np.ndarray], list[np.ndarray]]:
    kinds = draw(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, max_size=3))
    n, m = draw(st.integers(0, 12)), draw(st.integers(0, 12))
    left, right = [], []
    for kind in kinds:
        left.append(_column(draw(st.lists(COLUMNS[kind], min_size=n, max_size=n)), kind))
        right.append(_column(draw(st.lists(COLUMNS[kind], min_size=m, max_size=m)), kind))
    return left, right


@settings(max_examples=300, deadline=None)
@given(sides())
def test_pairs_are_those_of_equal_keys_in_the_left_order(
    case: tuple[list[np.ndarray], list[np.ndarray]],
) -> None:
    left, right = case
    n, m = len(left[0]), len(right[0])
    expected = [
        (i, j)
        for i in range(n)
        for j in range(m)
        if all(_same(_value(a, i), _value(b, j)) for a, b in zip(left, right, strict=True))
    ]
    mine, theirs = pairs_on(left, right)
    assert list(zip(mine.tolist(), theirs.tolist(), strict=True)) == expected


def test_a_join_too_large_stops_before_making_its_pairs() -> None:
    keys = np.zeros(1000, dtype=np.int64)
    with pytest.raises(TooLarge, match="1,000,000 matches"):
        equal_pairs(keys, keys, limit=999_999)
    assert len(equal_pairs(keys, keys, limit=1_000_000)[0]) == 1_000_000
    with pytest.raises(TooLarge):
        cross_pairs(1000, 1000, limit=10)
    assert [a.tolist() for a in cross_pairs(2, 3)] == [[0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2]]


def test_an_int_key_meets_a_float_key_of_the_same_value() -> None:
    mine, theirs = pairs_on([np.array([1, 2])], [np.array([2.0, 1.0, 1.5])])
    assert (mine.tolist(), theirs.tolist()) == ([0, 1], [1, 0])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-(2**62), 2**62)), max_size=30))
def test_a_running_maximum_starts_again_at_each_key(rows: list[tuple[int, int]]) -> None:
    """Per key, in order, the greatest value so far (how a negation finds the latest expiry
    of the versions made by a time, and an aggregate a combination's)."""
    rows = sorted(rows, key=lambda r: r[0])  # each key's rows together, in their order
    codes = np.array([k for k, _ in rows], dtype=np.int64)
    values = np.array([v for _, v in rows], dtype=np.int64)
    expected, best = [], {}
    for k, v in rows:
        best[k] = max(best.get(k, v), v)
        expected.append(best[k])
    assert running_max(values, codes).tolist() == expected


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-5, 5)), max_size=20),
    st.lists(st.tuples(st.integers(0, 4), st.integers(-7, 7)), max_size=20),
)
def test_the_last_row_at_or_before_a_time_is_found_within_its_key(
    rows: list[tuple[int, int]], wanted: list[tuple[int, int]]
) -> None:
    rows = sorted(rows)
    key = np.array([k for k, _ in rows], dtype=np.int64)
    time = np.array([t for _, t in rows], dtype=np.int64)
    got = last_at_or_before(
        key,
        time,
        np.array([k for k, _ in wanted], dtype=np.int64),
        np.array([t for _, t in wanted], dtype=np.int64),
    )
    for (k, t), at in zip(wanted, got.tolist(), strict=True):
        before = [i for i, (rk, rt) in enumerate(rows) if rk == k and rt <= t]
        assert at == (before[-1] if before else -1), (k, t)
