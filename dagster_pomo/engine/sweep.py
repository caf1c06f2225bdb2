"""Sliding-window aggregates by sorting and slicing, instead of pairing times with matches.

When every match of a group lives exactly ``reach`` (or for ever), the matches alive at a
time ``x`` are those made in ``(x - reach, x]``: a contiguous slice of the group's matches
sorted by time. Each aggregate is then a reduction over that slice, which numpy does in
compiled loops. The functions run inside Spark tasks, one group's Arrow table at a time,
so this module imports nothing of the project: it is shipped to executors by value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

# How each aggregate reduces a slice; ``min`` skips NaN and ``max`` lets it win, as Spark does.
REDUCERS = {"sum": np.add, "average": np.add, "min": np.fmin, "max": np.maximum}


def frames(times: np.ndarray, queries: np.ndarray, reach: int | None) -> tuple[np.ndarray, ...]:
    """For each query time ``x``, the slice ``[lo, hi)`` of the sorted ``times`` that fall in
    ``(x - reach, x]``, or in ``(-inf, x]`` without a ``reach``."""
    hi = np.searchsorted(times, queries, side="right")
    if reach is None:
        return np.zeros_like(hi), hi
    return np.searchsorted(times, queries - reach, side="right"), hi


def reduce_frames(
    ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray, running: bool
) -> np.ndarray:
    """``ufunc`` reduced over ``values[lo:hi]`` for each slice; what an empty slice gets is
    unspecified. ``running`` slices all start at 0, so one accumulation serves them all."""
    if len(values) == 0:
        return np.zeros(len(lo), dtype=values.dtype)
    if running:
        return ufunc.accumulate(values)[np.maximum(hi - 1, 0)]
    # reduceat reduces between consecutive indices: interleave each slice's ends, keep the
    # even results. The extra element lets an index equal len(values).
    padded = np.append(values, values[:1])
    bounds = np.empty(2 * len(lo), dtype=np.intp)
    bounds[0::2], bounds[1::2] = lo, hi
    return ufunc.reduceat(padded, bounds)[0::2]


def sweep(
    table: pa.Table,
    group: Sequence[str],
    aggregates: Sequence[tuple[str, str | None]],
    reach: int | None,
    never: int,
    start: int,
) -> pa.Table:
    """One row per distinct ``__at`` at or after ``start`` of one group's ``table``: the
    count ``__n`` of its full-length rows (``__full``; the other rows only ask about their
    time) alive then, the least expiry among them ``__least_exp``, and one ``__part<i>``
    per aggregate ``(name, value column)``: the count, the sum (an average's sum), the
    least or greatest value. Null where none is alive."""
    at = table.column("__at").to_numpy()
    queries = np.unique(at[at >= start])
    full = table.filter(table.column("__full"))
    order = np.argsort(full.column("__at").to_numpy(), kind="stable")
    full = full.take(order)
    times = full.column("__at").to_numpy()
    lo, hi = frames(times, queries, reach)
    n = hi - lo
    empty = n == 0
    if reach is None:
        least = np.full(len(queries), never)
    elif len(times):  # full rows all live ``reach``: the first to die is the first made
        least = times[np.minimum(lo, len(times) - 1)] + reach
    else:
        least = np.zeros(len(queries), dtype=np.int64)
    columns: dict[str, pa.Array] = {
        name: pa.repeat(table.column(name)[0], len(queries)) for name in group
    }
    columns["__at"] = pa.array(queries, type=pa.int64())
    columns["__n"] = pa.array(n, type=pa.int64())
    columns["__least_exp"] = pa.array(least, type=pa.int64(), mask=empty)
    for i, (fn, column) in enumerate(aggregates):
        if column is None:  # a count
            columns[f"__part{i}"] = pa.array(n, type=pa.int64())
            continue
        values = full.column(column).to_numpy()
        kind = table.schema.field(column).type
        if fn == "average":
            values, kind = values.astype(np.float64), pa.float64()
        elif fn == "sum" and pa.types.is_integer(kind):
            values, kind = values.astype(np.int64), pa.int64()
        reduced = reduce_frames(REDUCERS[fn], values, lo, hi, running=reach is None)
        columns[f"__part{i}"] = pa.array(reduced, type=kind, mask=empty)
    return pa.table(columns)


def per_group(
    group: Sequence[str],
    aggregates: Sequence[tuple[str, str | None]],
    reach: int | None,
    never: int,
    start: int,
) -> Callable[[pa.Table], pa.Table]:
    """:func:`sweep` as the function Spark calls with each group's table."""

    def run(table: pa.Table) -> pa.Table:
        return sweep(table, group, aggregates, reach, never, start)

    return run
