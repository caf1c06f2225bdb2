"""Sliding-window aggregates by sorting and slicing, instead of pairing times with matches.

When a match of a group lives exactly ``reach`` (or for ever), it is alive at a time ``x``
exactly when made in ``(x - reach, x]``: such matches alive at ``x`` are a contiguous slice
of the group's matches sorted by time, and each aggregate a reduction over that slice,
which numpy does in compiled loops. A match cut short covers a run of the sorted times
instead, and is paired with each. The functions run inside Spark tasks, one group's Arrow
table at a time, so this module imports nothing of the project: it is shipped to
executors by value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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


def pairs(starts: np.ndarray, untils: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every ``(query, row)`` index pair where row ``i`` is alive at the query time: each row
    covers the run of sorted ``queries`` in ``[starts[i], untils[i])``."""
    first = np.searchsorted(queries, starts, side="left")
    runs = np.maximum(np.searchsorted(queries, untils, side="left") - first, 0)
    rows = np.repeat(np.arange(len(starts)), runs)
    offsets = np.arange(len(rows)) - np.repeat(np.cumsum(runs) - runs, runs)
    return np.repeat(first, runs) + offsets, rows


def _scatter(fn: str, size: int, at: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``fn`` of the ``values`` that fall on each of ``size`` slots; what an empty slot gets
    is unspecified."""
    if fn in ("sum", "average") and values.dtype.kind == "f":
        return np.bincount(at, weights=values, minlength=size)
    if fn in ("sum", "average"):
        out = np.zeros(size, dtype=values.dtype)
    elif values.dtype.kind == "f":  # fmin skips NaN and maximum lets it win, as Spark does
        out = np.full(size, np.nan if fn == "min" else -np.inf)
    else:
        info = np.iinfo(values.dtype)
        out = np.full(size, info.max if fn == "min" else info.min, dtype=values.dtype)
    REDUCERS[fn].at(out, at, values)
    return out


def _either(
    fn: str, one: np.ndarray, has_one: np.ndarray, two: np.ndarray, has_two: np.ndarray
) -> np.ndarray:
    """Two partial results of ``fn`` combined where both exist, else whichever does."""
    both = REDUCERS[fn](one, two)
    return np.where(has_one & has_two, both, np.where(has_one, one, two))


def sweep(
    table: pa.Table,
    group: Sequence[str],
    aggregates: Sequence[tuple[str, str | None]],
    reach: int | None,
    never: int,
    start: int,
) -> pa.Table:
    """One row per distinct ``__at`` at or after ``start`` of one group's ``table`` of
    segments (``__at`` to ``__until``, expiry ``__mexp``): the count ``__n`` of those alive
    then, the least expiry among them ``__least_exp``, and one ``__part<i>`` per aggregate
    ``(name, value column)``: the count, the sum (an average's sum), the least or greatest
    value.

    Full-length segments (``__full``) are found as slices of the sorted times; the others
    are paired with each time they cover."""
    at = table.column("__at").to_numpy()
    queries = np.unique(at[at >= start])
    size = len(queries)
    full = table.filter(table.column("__full"))
    full = full.take(np.argsort(full.column("__at").to_numpy(), kind="stable"))
    short = table.filter(pc.invert(table.column("__full")))
    times = full.column("__at").to_numpy()
    lo, hi = frames(times, queries, reach)
    has_full = hi > lo
    slot, row = pairs(short.column("__at").to_numpy(), short.column("__until").to_numpy(), queries)
    paired_n = np.bincount(slot, minlength=size)
    has_short = paired_n > 0
    n = (hi - lo) + paired_n
    if reach is None:
        least = np.full(size, never)
    elif len(times):  # full rows all live ``reach``: the first to die is the first made
        least = times[np.minimum(lo, len(times) - 1)] + reach
    else:
        least = np.zeros(size, dtype=np.int64)
    cut = _scatter("min", size, slot, short.column("__mexp").to_numpy()[row])
    least = _either("min", least, has_full, cut, has_short)
    empty = n == 0
    columns: dict[str, pa.Array] = {name: pa.repeat(table.column(name)[0], size) for name in group}
    columns["__at"] = pa.array(queries, type=pa.int64())
    columns["__n"] = pa.array(n, type=pa.int64())
    columns["__least_exp"] = pa.array(least, type=pa.int64(), mask=empty)
    for i, (fn, column) in enumerate(aggregates):
        if column is None:  # a count
            columns[f"__part{i}"] = pa.array(n, type=pa.int64())
            continue
        kind = table.schema.field(column).type
        if fn == "average":
            kind = pa.float64()
        elif fn == "sum" and pa.types.is_integer(kind):
            kind = pa.int64()
        dtype = kind.to_pandas_dtype()
        slices = full.column(column).to_numpy().astype(dtype)
        reduced = reduce_frames(REDUCERS[fn], slices, lo, hi, running=reach is None)
        paired = _scatter(fn, size, slot, short.column(column).to_numpy().astype(dtype)[row])
        if fn in ("sum", "average"):  # an absent part adds nothing
            value = np.where(has_full, reduced, 0) + np.where(has_short, paired, 0)
        else:
            value = _either(fn, reduced, has_full, paired, has_short)
        columns[f"__part{i}"] = pa.array(value, type=kind, mask=empty)
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
