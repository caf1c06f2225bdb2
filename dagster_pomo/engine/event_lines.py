"""An output relation's events written as JSON Lines from its stored versions, in Arrow.

`pomo run --out` writes each event as `versions.output_object` makes it and `json.dumps`
writes it, sorted by time then arguments. Built one event at a time in Python, millions
of events take tens of seconds; on Spark, the JVM must start and run a job even when the
run itself needed none. Here the versions are merged per event, sorted and formatted
as whole Arrow columns, for the relations whose values Arrow writes as `json.dumps`
does (integers, times, booleans, floats but for a few) or that are cheap to write one by
one (text); the lines are the same bytes either way.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_pomo.plan.schema import Schema
from dagster_pomo.timeline import NEVER

# Value types written here: Arrow's text of integers and booleans is `json.dumps`'s, of
# floats nearly so (`_float_text`), and text is written by `json.dumps` value by value.
# Sets go to the other writers, as do relations that carry provenance.
WRITES = {"int", "bool", "str", "float"}
# The most versions the files of one range of times may hold for this process to write a
# relation (an epoch's file is never cut: a range holds one file at least); past it, Spark's
# writers write the relation. Its size does not matter: it is written a range at a time.
ROWS = 10_000_000
# The most versions it reads at once (about 220 bytes each at the peak, with the sort and
# the slices being formatted): a larger relation is read a range of times at a time
# (`time_slices`), so that the process's memory does not grow with the relation.
HELD = 1_000_000
SLICE = 1 << 18  # events formatted at once

# A stored file's rows and least and greatest time (None: not known).
FileTimes = tuple[int, int | None, int | None]


def writes(schema: Schema) -> bool:
    """Whether `write` can write the relation of ``schema``."""
    types = {*schema.types, *(typ for _, _, typ in schema.aggregates)}
    return not schema.provenance and types <= WRITES


def time_slices(
    files: Mapping[str, FileTimes], held: int
) -> list[tuple[int | None, int | None, list[str]]]:
    """Ranges of time ``[lo, hi)`` (None: unbounded), in order, that cut the versions of
    ``files`` (by name: rows, least and greatest ``t``) into reads of about ``held`` each
    (one file's more at most), each with the files holding versions in it. Every version
    of an event has the event's time, so each range's events are whole, and written one
    range after the other they are in order. One range when there are few, or a file's
    times are not known."""
    known = {name: f for name, f in files.items() if f[0] > 0}
    if sum(n for n, _, _ in known.values()) <= held or any(
        lo is None or hi is None for _, lo, hi in known.values()
    ):
        return [(None, None, list(known))]
    starts = sorted((lo, n) for n, lo, _ in known.values() if lo is not None)
    cuts: list[int] = []
    gathered = 0
    for lo, n in starts:
        if gathered >= held and lo > (cuts[-1] if cuts else starts[0][0]):
            cuts.append(lo)
            gathered = 0
        gathered += n
    bounds: list[int | None] = [None, *cuts, None]
    return [
        (lo, hi, [name for name, (_, a, b) in known.items() if _overlaps(a, b, lo, hi)])
        for lo, hi in zip(bounds, bounds[1:], strict=False)
    ]


def _overlaps(least: int | None, greatest: int | None, lo: int | None, hi: int | None) -> bool:
    return (hi is None or least is None or least < hi) and (
        lo is None or greatest is None or greatest >= lo
    )


def write(
    reads: Sequence[Callable[[], pa.Table]],
    schema: Schema,
    aggregating: bool,
    keys: Sequence[str],
    path: Path,
) -> int:
    """The events of the versions ``reads`` give (a relation's stored versions, a range of
    times each, in order: see `time_slices`) as lines in ``path``: one per event, sorted by
    time then arguments (`merged`); how many. A range's versions are let go of once
    merged: the process holds them or the events, not both, and Arrow's allocator hands
    back what it no longer uses after each step (it keeps freed memory for reuse: the
    process's peak would be twice the data it holds)."""
    pool = pa.default_memory_pool()
    written = 0
    # The text of a slice at a time, two made on threads (Arrow lets go of the interpreter's
    # lock) while this one writes the slices before, in order; at most three held at once.
    with open(path, "wb") as out, ThreadPoolExecutor(2, thread_name_prefix="pomo-lines") as made:
        for read in reads:
            events = merged(read(), schema, aggregating)
            pool.release_unused()
            pending: deque[Future[pa.ChunkedArray]] = deque()
            for start in [*range(0, events.num_rows, SLICE), None]:
                if start is not None:
                    part = events.slice(start, SLICE)
                    pending.append(made.submit(_lines, part, schema, keys))
                while pending and (start is None or len(pending) > 2):
                    for chunk in pending.popleft().result().chunks:
                        if len(chunk):
                            out.write(_data(chunk))
                    pool.release_unused()
            written += events.num_rows
            del events
            pool.release_unused()
    return written


def merged(versions: pa.Table, schema: Schema, aggregating: bool) -> pa.Table:
    """One row per event (arguments and ``t``) sorted by time then arguments, as
    `versions.merge_versions` merges: an aggregate's latest version (largest ``kt``, then
    ``_tau``), else the largest ``exp`` of its versions. One sort puts an event's versions
    together, its latest last."""
    identity = ["t", *schema.columns]
    for name, typ in zip(schema.columns, schema.types, strict=True):
        if typ == "float":  # -0.0 is the event of 0.0, written as 0.0 (`output_object`)
            at = versions.schema.get_field_index(name)
            versions = versions.set_column(at, name, pc.add(versions[name], 0.0))
    fast = _merged_packed(versions, identity, aggregating)
    if fast is not None:
        return fast
    order = [(c, "ascending") for c in (*identity, "kt", "_tau")]
    rows = versions.take(pc.sort_indices(versions, sort_keys=order))
    n = rows.num_rows
    if not n:
        return rows
    first = np.zeros(n, dtype=bool)  # where an event's versions begin
    first[0] = True
    for c in identity:
        column = rows[c]
        first[1:] |= pc.not_equal(column.slice(0, n - 1), column.slice(1)).to_numpy(
            zero_copy_only=False
        )
    if aggregating:  # the last version of each event
        return rows.filter(pa.array(np.append(first[1:], True)))
    starts = np.flatnonzero(first)
    exp = np.maximum.reduceat(rows["exp"].to_numpy(), starts)
    events = rows.take(pa.array(starts))
    return events.set_column(events.schema.get_field_index("exp"), "exp", pa.array(exp))


# A packed key: the columns' values less their least, in mixed radix (the first column most
# significant), so that one int64 orders rows as the columns do one after the other. Text
# is packed as its rank among the column's distinct values (kept, sorted, to decode it).
_Packing = list[tuple[str, pa.DataType, int, int, pa.Array | None]]  # + least, span, texts


def _merged_packed(versions: pa.Table, identity: list[str], aggregating: bool) -> pa.Table | None:
    """`merged` by sorting one int64 a version, where the identity's values (and, for an
    aggregate, ``kt`` and ``_tau``) are integers, booleans or text whose ranges (numbers
    of distinct texts) fit in one: no sort over several columns and no gather of whole
    rows (a tenth of the time for millions of versions). The event's columns are decoded
    from its key. None otherwise."""
    packed = _packed(versions, identity) if versions.num_rows else None
    if packed is None:
        return None
    key, packing = packed
    span = _span(packing)
    columns: dict[str, pa.Array]
    if aggregating:  # the latest version of each event: sorted last among its versions
        later = _packed(versions, ["kt", "_tau"])
        if later is None or span * _span(later[1]) >= _LIMIT:
            return None
        order = np.argsort(key * _span(later[1]) + later[0], kind="stable")
        ordered = key[order]
        last = np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))
        columns = _unpacked(ordered[last], packing)
        rest = versions.take(pa.array(order[last]))
        columns.update({c: rest[c] for c in rest.column_names if c not in columns})
    else:
        exp = versions["exp"].to_numpy()
        if exp.min() == exp.max():  # one expiry: the events are the distinct keys
            events = _distinct(key, span)
            merged_exp = np.full(len(events), exp[0])
        else:
            order = np.argsort(key, kind="stable")
            ordered = key[order]
            starts = _starts(ordered)
            events = ordered if starts is None else ordered[starts]
            if starts is None:
                merged_exp = exp[order]
            else:
                merged_exp = np.maximum.reduceat(exp[order], starts)
            del order, ordered
        del exp, key
        columns = _unpacked(events, packing)
        columns["exp"] = pa.array(merged_exp)
    return pa.table(columns)


def _distinct(key: np.ndarray, span: int) -> np.ndarray:
    """The distinct values of ``key`` (this function's own: it may sort it where it is), in
    order, each in ``[0, span)``. Where the keys are dense in their range (as a closure's
    pairs of node numbers are), each is marked in a table of the range, which is read back
    in order: a table no larger than the keys themselves, and two passes over memory where
    sorting 3.85 million keys took 0.24 s (0.015 s)."""
    if span <= 8 * len(key):
        seen = np.zeros(span, dtype=bool)
        seen[key] = True
        return np.flatnonzero(seen)
    key.sort()
    starts = _starts(key)
    return key if starts is None else key[starts]


def _starts(ordered: np.ndarray) -> np.ndarray | None:
    """Where each run of equal keys begins in ``ordered``; None when every key differs (the
    common case: then the keys are the events, and no copy of them is made)."""
    differs = np.empty(len(ordered), dtype=bool)
    differs[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=differs[1:])
    if differs.all():
        return None
    return np.flatnonzero(differs)


_LIMIT = 1 << 62


def _packed(table: pa.Table, columns: list[str]) -> tuple[np.ndarray, _Packing] | None:
    """The rows of ``columns`` packed into one int64 each (see `_Packing`), or None where a
    column is not integers, booleans or text, holds a null, or the ranges do not fit."""
    key: np.ndarray | None = None  # built in place: millions of rows, each copy is costly
    packing: _Packing = []
    total = 1
    for name in columns:
        column = table[name]
        texts = None
        if column.null_count:
            return None
        if pa.types.is_string(column.type):
            values, texts = _ranks(column)
        elif pa.types.is_integer(column.type) or pa.types.is_boolean(column.type):
            values = column.to_numpy().astype(np.int64, copy=False)
        else:
            return None
        least, most = int(values.min()), int(values.max())
        span = most - least + 1
        total *= span
        if total >= _LIMIT:
            return None
        if span > 1:
            if key is None:
                key = values - least
            else:
                key *= span
                key += values
                key -= least  # int64 wraps around in between: the sum is exact
        packing.append((name, column.type, least, span, texts))
    return (np.zeros(table.num_rows, dtype=np.int64) if key is None else key), packing


def _ranks(column: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Each text's rank among the column's distinct texts, and those texts sorted (by code
    point, as Python sorts them: UTF-8's byte order)."""
    encoded = pc.dictionary_encode(column.combine_chunks())
    order = pc.sort_indices(encoded.dictionary).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[encoded.indices.to_numpy()], encoded.dictionary.take(pa.array(order))


def _span(packing: _Packing) -> int:
    """How many keys `_packed` can make with ``packing``."""
    return int(np.prod([span for _, _, _, span, _ in packing], dtype=object))


def _unpacked(keys: np.ndarray, packing: _Packing) -> dict[str, pa.Array]:
    """The columns `_packed` packed into ``keys``, in their types."""
    columns: dict[str, pa.Array] = {}
    rest = keys
    packed = [i for i, (_, _, _, span, _) in enumerate(packing) if span > 1]
    for i in reversed(range(len(packing))):
        name, typ, least, span, texts = packing[i]
        if span == 1:  # one value: not in the key
            value = np.full(len(keys), least, dtype=np.int64)
        elif i == packed[0]:  # the most significant: what is left is its value
            value = rest + least
        else:
            rest, value = np.divmod(rest, span)
            value += least
        columns[name] = pa.array(value).cast(typ) if texts is None else texts.take(value)
    return dict(reversed(columns.items()))


def _lines(events: pa.Table, schema: Schema, keys: Sequence[str]) -> pa.ChunkedArray:
    """Each event's line, newline included (`versions.output_object` as `json.dumps`
    writes it). A column with one value in the slice (often ``exp``, the aggregates'
    braces, a time) is written once into the text around it: the join's cost grows with
    its number of parts."""
    args = [[_part(events[c], typ)] for c, typ in zip(schema.columns, schema.types, strict=True)]
    aggs = [
        [json.dumps(key) + ": ", _part(events[column], typ)]
        for key, column, (_, _, typ) in zip(
            keys, schema.aggregate_columns, schema.aggregates, strict=True
        )
    ]
    exp = events["exp"]
    never = pc.greater_equal(exp, NEVER)
    if not exp.null_count and pc.all(never).as_py():
        exp_text: object = "null"
    else:
        exp_text = _one(exp, "int") or pc.if_else(never, "null", pc.cast(exp, pa.string()))
    parts: list[object] = ['{"args": [']
    parts += _joined(args)
    parts += ['], "t": ', _part(events["t"], "int"), ', "exp": ', exp_text, ', "aggregates": {']
    parts += _joined(aggs)
    parts += ["}}\n"]
    merged: list[object] = []
    for part in parts:  # neighbouring texts as one
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        else:
            merged.append(part)
    if len(merged) == 1:  # every line the same
        return pa.chunked_array([pa.array([merged[0]] * events.num_rows, pa.string())])
    lines = pc.binary_join_element_wise(*merged, "")
    return lines if isinstance(lines, pa.ChunkedArray) else pa.chunked_array([lines])


def _joined(items: list[list[object]]) -> list[object]:
    """The pieces of ``items`` with ", " between items, as pieces of `_lines`'s join."""
    out: list[object] = []
    for i, item in enumerate(items):
        out += [", ", *item] if i else item
    return out


def _part(column: pa.ChunkedArray, typ: str) -> object:
    """A column's text (`_text`), or its one value's text when it has one."""
    return _one(column, typ) or _text(column, typ)


def _one(column: pa.ChunkedArray, typ: str) -> str | None:
    """The text of the one value of an integer or boolean ``column``, none null; else None."""
    if typ not in ("int", "bool") or column.null_count or not len(column):
        return None
    least, most = pc.min_max(column).values()
    if least != most:
        return None
    return json.dumps(least.as_py())


def _text(column: pa.ChunkedArray, typ: str) -> pa.ChunkedArray | pa.Array:
    """Each value as `json.dumps` writes it (``null`` for none)."""
    if typ == "str":  # each distinct text written once
        encoded = pc.dictionary_encode(column.combine_chunks())
        made = [json.dumps(v) for v in encoded.dictionary.to_pylist()]
        return pc.fill_null(pa.array(made, pa.string()).take(encoded.indices), "null")
    if typ == "float":
        return _float_text(column.combine_chunks())
    return pc.fill_null(pc.cast(column, pa.string()), "null")


def _float_text(column: pa.Array) -> pa.Array:
    """Each float as `json.dumps` writes it: Python's shortest text that reads back as the
    same float. Arrow's text has the same digits; from 1e-4 up to 1e10 (and for zero) it
    differs only by the ``.0`` of a whole number, added here. Python writes the others
    (exponents, non-finite values: rare in events), value by value."""
    values = column.to_numpy(zero_copy_only=False)  # a null reads as NaN
    text = pc.cast(column, pa.string())
    size = np.abs(values)
    with np.errstate(invalid="ignore"):
        plain = ((size >= 1e-4) & (size < 1e10)) | (values == 0)
        whole = plain & (np.floor(values) == values)
    if whole.any():
        text = pc.if_else(pa.array(whole), pc.binary_join_element_wise(text, ".0", ""), text)
    other = ~plain & ~column.is_null().to_numpy(zero_copy_only=False)
    if other.any():
        made = pa.array([json.dumps(float(v)) for v in values[other]], pa.string())
        text = pc.replace_with_mask(text, pa.array(other), made)
    return pc.fill_null(text, "null")


def _data(chunk: pa.Array) -> memoryview:
    """The bytes a string array's values hold, end to end."""
    offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32)[chunk.offset :]
    begin, end = int(offsets[0]), int(offsets[len(chunk)])
    return memoryview(chunk.buffers()[2])[begin:end]  # type: ignore[index]
