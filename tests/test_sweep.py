"""The sliding-window sweep against the definition: the segments alive at each time."""

from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_pomo.engine.sweep import sweep

NEVER = 2**63 - 1
AGGREGATES = [("count", None), ("sum", "i"), ("average", "f"), ("min", "f"), ("max", "i")]
NAN = st.just(math.nan)

# A segment: made at t, alive until the row's end; full-length ones live exactly `reach`
# (or for ever), the others less, with an expiry of their own at or after their end.
segments = st.lists(
    st.tuples(
        st.integers(0, 40),
        st.booleans(),
        st.integers(1, 50),
        st.integers(0, 5),
        st.integers(-5, 5),
        st.one_of(st.floats(-4, 4, allow_nan=False), NAN),
    ),
    min_size=1,
    max_size=30,
)


def _table(data, reach):  # noqa: ANN001, ANN202
    rows = []
    for t, full, length, extra, i, f in data:
        full = full or reach == 1
        if full:
            until = NEVER if reach is None else t + reach
            mexp = until
        else:
            until = t + (length if reach is None else 1 + length % (reach - 1))
            mexp = until + extra
        rows.append((t, until, mexp, full, i, f))
    names = ["__at", "__until", "__mexp", "__full", "i", "f"]
    table = {name: [r[k] for r in rows] for k, name in enumerate(names)}
    return rows, pa.table({"g": ["k"] * len(rows), **table})


def _expected(rows, start):  # noqa: ANN001, ANN202
    out = {}
    for x in sorted({r[0] for r in rows if r[0] >= start}):
        alive = [r for r in rows if r[0] <= x < r[1]]
        floats = [r[5] for r in alive]
        out[x] = {
            "__n": len(alive),
            "__least_exp": min((r[2] for r in alive), default=None),
            "__part0": len(alive),
            "__part1": sum(r[4] for r in alive) if alive else None,
            "__part2": sum(floats) if alive else None,
            "__part3": min((f for f in floats if not math.isnan(f)), default=math.nan)
            if alive
            else None,
            "__part4": max((r[4] for r in alive), default=None),
        }
    return out


@settings(max_examples=400, deadline=None)
@given(segments, st.one_of(st.none(), st.integers(1, 15)), st.integers(0, 40))
def test_each_time_sees_exactly_the_segments_alive_then(data, reach, start) -> None:
    rows, table = _table(data, reach)
    got = sweep(table, ["g"], AGGREGATES, reach, NEVER, start).to_pylist()
    expected = _expected(rows, start)
    assert [r["__at"] for r in got] == list(expected)
    for r in got:
        want = expected[r["__at"]]
        assert r["g"] == "k"
        for name in ("__n", "__least_exp", "__part0", "__part1", "__part4"):
            assert r[name] == want[name], name
        for name in ("__part2", "__part3"):
            if want[name] is None or math.isnan(want[name]):
                assert r[name] is None or math.isnan(r[name]), name
            else:
                assert math.isclose(r[name], want[name], abs_tol=1e-9), name
