"""Sliding-window aggregates by sorting and slicing, instead of pairing times with matches.

When a match of a group lives exactly ``reach`` (or for ever), it is alive at a time ``x``
exactly when made in ``(x - reach, x]``: such matches alive at ``x`` are a contiguous slice
of the group's matches sorted by time, and each aggregate a reduction over that slice,
which numpy does in compiled loops. A match cut short covers a run of the sorted times
instead, and is paired with each. The functions run inside Spark tasks, a batch of a
partition's groups at a time, so this module imports nothing of the project: it is
shipped to executors by value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_pomo.engine.local.column_joins import run_starts, spread

Ids = np.ndarray | None  # a sorted table's group numbers, row by row (see `_by_group_and_time`)

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
    return spread(first, runs)


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
    end: int | None = None,
    folds: Mapping[int, Callable[[list[object]], object]] | None = None,
) -> pa.Table:
    """One row per group and distinct ``__at`` at or after ``start`` of ``table``'s segments
    (``__at`` to ``__until``, expiry ``__mexp``): the count ``__n`` of those alive then, the
    least expiry among them ``__least_exp``, and one ``__part<i>`` per aggregate
    ``(name, value column)``: the count, the sum (an average's sum), the least or greatest
    value, or (aggregate ``i`` of ``folds``) its function of the values alive then (a set, a
    lattice's merge: a loop over each time's values). With an ``end``, also each ``__until``
    in ``[start, end)``, where a segment stops
    counting (a sliding window's value changes when a match expires), and only the times
    where some segment is alive.

    Full-length segments (``__full``) are found as slices of the sorted times; the others
    are paired with each time they cover. All groups are swept at once: each one's times
    are moved to a stretch of the time line of its own, far enough from the next that no
    slice reaches across (a few calls into numpy whatever the number of groups)."""
    # Sorted by time within each group, the moved times below come sorted: their distinct
    # values and the full segments' order take a pass, not a sort each.
    table, ids = _by_group_and_time(table, group)
    firsts = group_starts(table, group) if ids is None else run_starts(ids)
    if table.num_rows == 0:
        none = np.zeros(0, dtype=np.int64)
        columns = {"__at": none, "__n": none, "__least_exp": none}
        parts = {i: none for i, (_, column) in enumerate(aggregates) if column is not None}
        return _swept(table, group, aggregates, columns, parts, none)
    at = table.column("__at").to_numpy()
    untils = table.column("__until").to_numpy()
    ending = (untils >= start) & (untils < end) if end is not None else np.zeros(len(at), bool)
    low = int(at.min())
    top = max(int(at.max()), int(untils[ending].max()) if ending.any() else low)
    span = top - low + (reach or 0) + 1
    if len(firsts) > 1 and len(firsts) * span >= 2**62:  # too far apart: one at a time
        ends = [*firsts[1:], table.num_rows]
        return pa.concat_tables(
            sweep(table.slice(a, b - a), group, aggregates, reach, never, start, end, folds)
            for a, b in zip(firsts, ends, strict=True)
        )
    sizes = np.diff(np.append(firsts, table.num_rows))
    shift = np.repeat(np.arange(len(firsts), dtype=np.int64) * span - low, sizes)
    moved = at + shift  # group g's times now fall in [g * span, (g + 1) * span - reach)
    queries = _distinct(moved[at >= start])
    if ending.any():  # and where a segment stops counting
        queries = np.unique(np.concatenate([queries, untils[ending] + shift[ending]]))
    size = len(queries)
    of_query = queries // span
    is_full = table.column("__full").to_numpy(zero_copy_only=False)
    order = np.flatnonzero(is_full)
    times = moved[order]
    if reach is None:  # whatever the group made up to the time
        lo = np.searchsorted(times, of_query * span, side="left")
        hi = np.searchsorted(times, queries, side="right")
    else:
        lo, hi = frames(times, queries, reach)
    has_full = hi > lo
    short = np.flatnonzero(~is_full)
    # A short segment's end, moved with its group, is cut to just after the group's times.
    ends = np.minimum(untils[short], top + 1)
    slot, row = pairs(moved[short], ends + shift[short], queries)
    row = short[row]
    paired_n = np.bincount(slot, minlength=size)
    has_short = paired_n > 0
    n = (hi - lo) + paired_n
    if reach is None:
        least = np.full(size, never)
    elif len(times):  # full rows all live ``reach``: the first to die is the first made
        least = at[order[np.minimum(lo, len(times) - 1)]] + reach
    else:
        least = np.zeros(size, dtype=np.int64)
    cut = _scatter("min", size, slot, _column(table, "__mexp")[row])
    least = _either("min", least, has_full, cut, has_short)
    parts: dict[int, np.ndarray] = {}
    running = reach is None and len(firsts) == 1  # every slice starts at the first row
    for i, (fn, column) in enumerate(aggregates):
        if column is None:  # a count
            continue
        if folds and i in folds:
            held = np.empty(table.num_rows, dtype=object)
            held[:] = table.column(column).to_pylist()
            parts[i] = _folded(folds[i], held[order], lo, hi, slot, held[row])
            continue
        values = _column(table, column).astype(_kind(table, fn, column).to_pandas_dtype())
        reduced = reduce_frames(REDUCERS[fn], values[order], lo, hi, running)
        paired = _scatter(fn, size, slot, values[row])
        if fn in ("sum", "average"):  # an absent part adds nothing
            parts[i] = np.where(has_full, reduced, 0) + np.where(has_short, paired, 0)
        else:
            parts[i] = _either(fn, reduced, has_full, paired, has_short)
    columns = {"__at": queries - of_query * span + low, "__n": n, "__least_exp": least}
    rows = firsts[of_query]
    if end is not None and not n.all():  # a time where every segment has ended: no row
        alive = n > 0
        columns = {k: v[alive] for k, v in columns.items()}
        parts = {i: v[alive] for i, v in parts.items()}
        rows = rows[alive]
    return _swept(table, group, aggregates, columns, parts, rows)


def _folded(
    fold: Callable[[list[object]], object],
    ordered: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    slot: np.ndarray,
    paired: np.ndarray,
) -> np.ndarray:
    """Each time's values folded by ``fold``: the slice ``[lo, hi)`` of the full segments'
    (``ordered``), and the short segments' paired with it (``slot``, ``paired``); None
    where there are none."""
    extra: list[list[object]] = [[] for _ in range(len(lo))]
    for k, v in zip(slot.tolist(), paired.tolist(), strict=True):
        extra[k].append(v)
    items = ordered.tolist()
    out = np.empty(len(lo), dtype=object)
    for k, (a, b) in enumerate(zip(lo.tolist(), hi.tolist(), strict=True)):
        values = items[a:b] + extra[k]
        out[k] = fold(values) if values else None
    return out


def _by_group_and_time(table: pa.Table, group: Sequence[str]) -> tuple[pa.Table, Ids]:
    """``table`` sorted by ``group`` and then ``__at``: by one number a group (each column's
    rank among its distinct values, mixed) and by time, stably, which takes about half
    what sorting by the columns themselves does (strings compare slowly); and each sorted
    row's group number (None when the groups were too many to number), which tells where
    a group begins with no comparison of strings."""
    if table.num_rows == 0:
        return table, None
    ids = np.zeros(table.num_rows, dtype=np.int64)
    size = 1
    for name in group:
        column = table.column(name).combine_chunks()
        if pa.types.is_null(column.type):
            continue  # one value
        if pa.types.is_floating(column.type):
            column = pc.add(column, 0.0)  # -0.0 is 0.0, as `group_starts` compares
        encoded = pc.dictionary_encode(column)
        distinct = len(encoded.dictionary)
        size *= distinct
        if size >= 2**62:  # too many to number as one: sort by the columns
            return table.sort_by([(name, "ascending") for name in (*group, "__at")]), None
        rank = np.empty(distinct, dtype=np.int64)
        rank[pc.array_sort_indices(encoded.dictionary).to_numpy()] = np.arange(distinct)
        ids = ids * distinct + rank[encoded.indices.to_numpy(zero_copy_only=False)]
    order = np.argsort(table.column("__at").to_numpy(), kind="stable")
    if group:
        order = order[np.argsort(ids[order], kind="stable")]
    return table.take(order), ids[order]


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of sorted ``values``, in order."""
    if len(values) == 0:
        return values
    return values[np.append(True, values[1:] != values[:-1])]


def group_starts(table: pa.Table, group: Sequence[str]) -> np.ndarray:
    """Where each group begins in ``table``, whose rows are sorted by ``group`` (never null;
    NaN is one value, as for Spark)."""
    change = np.zeros(table.num_rows, dtype=bool)
    change[:1] = True
    for name in group:
        values = _column(table, name)
        differ = values[1:] != values[:-1]
        if values.dtype.kind == "f":
            differ &= ~(np.isnan(values[1:]) & np.isnan(values[:-1]))
        change[1:] |= differ
    return np.flatnonzero(change)


def _column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy(zero_copy_only=False)


def _kind(table: pa.Table, fn: str, column: str) -> pa.DataType:
    """The Arrow type of an aggregate's part: averages and sums of integers widen."""
    kind = table.schema.field(column).type
    if fn == "average":
        return pa.float64()
    if fn == "sum" and pa.types.is_integer(kind):
        return pa.int64()
    return kind


def _swept(
    table: pa.Table,
    group: Sequence[str],
    aggregates: Sequence[tuple[str, str | None]],
    columns: Mapping[str, np.ndarray],
    parts: Mapping[int, np.ndarray],
    rows: np.ndarray,
) -> pa.Table:
    """The output: each time's group (the values of ``table``'s row ``rows``), its counts and
    parts, null where no segment is alive then."""
    n = columns["__n"]
    empty = n == 0
    at = pa.array(rows, type=pa.int64())
    out: dict[str, pa.Array] = {name: table.column(name).take(at) for name in group}
    out["__at"] = pa.array(columns["__at"], type=pa.int64())
    out["__n"] = pa.array(n, type=pa.int64())
    out["__least_exp"] = pa.array(columns["__least_exp"], type=pa.int64(), mask=empty)
    for i, (fn, column) in enumerate(aggregates):
        if column is None:
            out[f"__part{i}"] = pa.array(n, type=pa.int64())
        elif parts[i].dtype == object and fn not in REDUCERS:  # folded
            out[f"__part{i}"] = pa.array(parts[i].tolist(), mask=empty, from_pandas=True)
        else:
            kind = _kind(table, fn, column)
            value = parts[i].astype(kind.to_pandas_dtype())
            out[f"__part{i}"] = pa.array(value, type=kind, mask=empty)
    return pa.table(out)


def streamed(
    group: Sequence[str],
    aggregates: Sequence[tuple[str, str | None]],
    reach: int | None,
    never: int,
    start: int,
    end: int | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """:func:`sweep` as the function Spark maps over a partition's batches, whose rows come
    sorted by ``group``: the groups a batch ends are swept together, and the last one,
    which the next batch may go on with, waits for it. One call a batch, not one a group."""

    def swept(table: pa.Table) -> Iterator[pa.RecordBatch]:
        return iter(sweep(table, group, aggregates, reach, never, start, end).to_batches())

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        held: pa.Table | None = None  # the rows of one group, which may go on
        for batch in batches:
            table = pa.Table.from_batches([batch])
            if table.num_rows == 0:
                continue
            if held is not None:
                edge = pa.concat_tables([held.slice(held.num_rows - 1), table.slice(0, 1)])
                if len(group_starts(edge, group)) > 1:  # the batch starts a group of its own
                    yield from swept(held)
                    held = None
            last = int(group_starts(table, group)[-1])  # the batch's last group starts here
            if last == 0:
                held = table if held is None else pa.concat_tables([held, table])
                continue
            ended = table.slice(0, last)
            yield from swept(ended if held is None else pa.concat_tables([held, ended]))
            held = table.slice(last)
        if held is not None:
            yield from swept(held)

    return run
