"""The sliding-window sweep against the definition: the full-length rows alive at each time."""

from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_pomo.engine.sweep import sweep

NEVER = 2**63 - 1
AGGREGATES = [("count", None), ("sum", "i"), ("average", "f"), ("min", "f"), ("max", "i")]

rows = st.lists(
    st.tuples(
        st.integers(0, 40),
        st.booleans(),
        st.integers(-5, 5),
        st.one_of(st.floats(-4, 4, allow_nan=False), st.just(math.nan)),
    ),
    min_size=1,
    max_size=30,
)


def _expected(data, reach, start):  # noqa: ANN001, ANN202
    out = {}
    for x in sorted({t for t, *_ in data if t >= start}):
        alive = [
            (t, i, f)
            for t, full, i, f in data
            if full and t <= x and (reach is None or t > x - reach)
        ]
        if not alive:
            out[x] = (0, None, 0, None, None, None, None)
            continue
        floats = [f for _, _, f in alive]
        least = NEVER if reach is None else min(t for t, _, _ in alive) + reach
        smallest = min((f for f in floats if not math.isnan(f)), default=math.nan)
        out[x] = (
            len(alive),
            least,
            len(alive),
            sum(i for _, i, _ in alive),
            sum(floats),
            smallest,
            max(i for _, i, _ in alive),
        )
    return out


@settings(max_examples=300, deadline=None)
@given(rows, st.one_of(st.none(), st.integers(1, 15)), st.integers(0, 40))
def test_each_time_sees_exactly_the_full_rows_alive_then(data, reach, start) -> None:
    table = pa.table(
        {
            "g": ["k"] * len(data),
            "__at": pa.array([r[0] for r in data], pa.int64()),
            "__full": [r[1] for r in data],
            "i": pa.array([r[2] for r in data], pa.int64()),
            "f": pa.array([r[3] for r in data], pa.float64()),
        }
    )
    got = sweep(table, ["g"], AGGREGATES, reach, NEVER, start).to_pylist()
    expected = _expected(data, reach, start)
    assert [r["__at"] for r in got] == list(expected)
    for r in got:
        n, least, count, total, floats, smallest, largest = expected[r["__at"]]
        assert r["g"] == "k"
        assert (r["__n"], r["__least_exp"], r["__part0"], r["__part1"]) == (
            n,
            least,
            count,
            total if n else None,
        )
        assert r["__part4"] == largest
        for value, want in ((r["__part2"], floats), (r["__part3"], smallest)):
            if want is None or (isinstance(want, float) and math.isnan(want)):
                assert value is None or math.isnan(value)
            else:
                assert math.isclose(value, want, abs_tol=1e-9)
