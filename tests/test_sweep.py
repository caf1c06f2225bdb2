"""The sliding-window sweep against the definition: the segments alive at each time."""

from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_pomo.engine.local.sliding_aggregates import streamed, sweep

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
        st.sampled_from(["k", "m", "a"]),
    ),
    min_size=1,
    max_size=30,
)


def _table(data, reach):  # noqa: ANN001, ANN202
    rows = []
    for t, full, length, extra, i, f, g in data:
        full = full or reach == 1
        if full:
            until = NEVER if reach is None else t + reach
            mexp = until
        else:
            until = t + (length if reach is None else 1 + length % (reach - 1))
            mexp = until + extra
        rows.append((t, until, mexp, full, i, f, g))
    names = ["__at", "__until", "__mexp", "__full", "i", "f", "g"]
    return rows, pa.table({name: [r[k] for r in rows] for k, name in enumerate(names)})


def _expected(rows, start):  # noqa: ANN001, ANN202
    out = {}
    for g, x in sorted({(r[6], r[0]) for r in rows if r[0] >= start}):
        alive = [r for r in rows if r[6] == g and r[0] <= x < r[1]]
        floats = [r[5] for r in alive]
        out[g, x] = {
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


def _check(got, expected) -> None:  # noqa: ANN001
    assert [(r["g"], r["__at"]) for r in got] == list(expected)
    for r in got:
        want = expected[r["g"], r["__at"]]
        for name in ("__n", "__least_exp", "__part0", "__part1", "__part4"):
            assert r[name] == want[name], name
        for name in ("__part2", "__part3"):
            if want[name] is None or math.isnan(want[name]):
                assert r[name] is None or math.isnan(r[name]), name
            else:
                assert math.isclose(r[name], want[name], abs_tol=1e-9), name


@settings(max_examples=400, deadline=None)
@given(segments, st.one_of(st.none(), st.integers(1, 15)), st.integers(0, 40))
def test_each_time_sees_exactly_the_segments_alive_then(data, reach, start) -> None:
    """Each group's times, whatever order its rows come in and with other groups beside it."""
    rows, table = _table(data, reach)
    _check(sweep(table, ["g"], AGGREGATES, reach, NEVER, start).to_pylist(), _expected(rows, start))


@settings(max_examples=200, deadline=None)
@given(segments, st.one_of(st.none(), st.integers(1, 15)), st.lists(st.integers(0, 30)))
def test_a_partition_swept_batch_by_batch_gives_each_group_once(data, reach, cuts) -> None:
    """Spark hands a partition over in batches that may cut a group in two: every group's
    times still come out once, as if its rows had come together."""
    rows, table = _table(data, reach)
    table = table.sort_by("g")
    bounds = sorted({0, table.num_rows, *(c for c in cuts if c < table.num_rows)})
    pieces = zip(bounds, bounds[1:], strict=False)
    batches = [table.slice(a, b - a).to_batches()[0] for a, b in pieces]
    out = streamed(["g"], AGGREGATES, reach, NEVER, 0)(iter(batches))
    got = pa.Table.from_batches(list(out)).to_pylist()
    _check(sorted(got, key=lambda r: (r["g"], r["__at"])), _expected(rows, 0))


def test_groups_too_far_apart_to_line_up_are_swept_one_by_one() -> None:
    """Times so far apart that moving each group to a stretch of its own would overflow."""
    far = 2**61
    data = [(0, True, 1, 0, 1, 1.0, "a"), (far, True, 1, 0, 2, 2.0, "b")]
    data += [(3, True, 1, 0, 4, 4.0, "b"), (far + 5, True, 1, 0, 8, 8.0, "a")]
    rows, table = _table(data, 10)
    got = sweep(table, ["g"], AGGREGATES, 10, NEVER, 0).to_pylist()
    assert len(got) == 4
    _check(got, _expected(rows, 0))
    one = [(0, True, 1, 0, 1, 1.0, "a"), (2**62, True, 1, 0, 8, 8.0, "a")]  # one group, far
    rows, table = _table(one, 10)
    _check(sweep(table, ["g"], AGGREGATES, 10, NEVER, 0).to_pylist(), _expected(rows, 0))


@settings(max_examples=200, deadline=None)
@given(segments, st.lists(st.sampled_from([math.nan, -0.0, 0.0, 1.5]), min_size=30, max_size=30))
def test_a_float_group_column_takes_nan_as_one_value_and_minus_zero_as_zero(data, zs) -> None:
    """Groups over a float column as Spark groups them: every NaN is one group, -0.0 and 0.0
    another: each (group, time) comes out once, counting the segments alive then."""
    rows, table = _table(data, 5)
    z = zs[: len(rows)]
    table = table.append_column("z", pa.array(z, type=pa.float64()))

    def key(value: float) -> object:
        return "nan" if math.isnan(value) else value + 0.0

    want: dict[tuple, int] = {}
    for zi, g, x in {(key(zv), r[6], r[0]) for zv, r in zip(z, rows, strict=True)}:
        alive = [r for zv, r in zip(z, rows, strict=True) if (key(zv), r[6]) == (zi, g)]
        want[zi, g, x] = sum(1 for r in alive if r[0] <= x < r[1])
    got = sweep(table, ["z", "g"], AGGREGATES, 5, NEVER, 0).to_pylist()
    assert {(key(r["z"]), r["g"], r["__at"]): r["__n"] for r in got} == want
    assert len(got) == len(want)
