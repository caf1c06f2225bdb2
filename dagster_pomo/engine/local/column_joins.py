"""Equi-joins and keys over numpy columns: which rows meet, which rows are one key.

The local executor pairs rows this way wherever it runs: a rule's matches worked out in
this process (`rules`) and a recursion's rounds inside a Spark task or here
(`linear_fixpoint`). One side
is sorted and the other searched in it, so a join costs two sorts' worth of work and
makes no hash table of frames; the number of pairs is known before any is made, so a
join too large for the process stops before it takes the memory. A key of several
columns, or of strings, is first made one integer per row (`key_codes`); so is a key
the executors group by or keep one row of (`row_codes`, `distinct`, `groups`): pandas'
own group-bys and de-duplications number text through C strings, which end at a NUL
character, and would make "a" and "a\\x00" one key.

Keys compare as Spark's joins compare them: NaN equals NaN and ``-0.0`` equals ``0.0``.
The executor holds its rows as numpy columns by name (`Cols`), taken from Arrow tables
(`from_arrow`) and given back as Arrow (`to_arrow`): a pandas frame would copy them
at every step and index them for nothing.
This module imports numpy, pandas and pyarrow only: it ships to Spark's tasks by value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

Cols = dict[str, np.ndarray]  # rows as numpy columns of one length, by name


def height(cols: Mapping[str, np.ndarray]) -> int:
    """How many rows (none without a column)."""
    return len(next(iter(cols.values()))) if cols else 0


def take(cols: Mapping[str, np.ndarray], at: np.ndarray) -> Cols:
    """The rows ``at`` (positions, or a mask) of every column."""
    return {c: v[at] for c, v in cols.items()}


def concat(parts: Sequence[Mapping[str, np.ndarray]]) -> Cols:
    """Rows of ``parts`` (at least one, with the columns of the first) one after another."""
    if len(parts) == 1:
        return dict(parts[0])
    return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


def objects(values: Sequence[object]) -> np.ndarray:
    """Python values (text, lists) as a numpy column of objects, as Arrow gives text."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def from_arrow(table: pa.Table) -> Cols:
    """A table's columns in numpy: numbers as they are, text as Python strings, a set as a
    numpy array of its values, an integer column with nulls as floats with NaN (as pandas
    reads them). Text goes through pandas' conversion, which makes one Python string per
    distinct value (a column of 625,000 readings' 300 tank names: 6 ms against 30 ms)."""
    return {n: _numpy(table.column(n)) for n in table.column_names}


def _numpy(column: pa.ChunkedArray) -> np.ndarray:
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        return column.to_numpy()
    return column.to_pandas().to_numpy()


def to_arrow(cols: Mapping[str, np.ndarray], schema: pa.Schema) -> pa.Table:
    """``schema``'s columns of ``cols`` in its types; NaN is null, as in a pandas frame."""
    return pa.table([_arrow(cols[f.name], f.type) for f in schema], schema=schema)


def _arrow(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    """One column in Arrow; a column of lists (sets, provenance) from its Python lists,
    which numpy's converter does not take."""
    if pa.types.is_list(kind):
        return pa.array([None if v is None else list(v) for v in values], type=kind)
    return pa.array(values, type=kind, from_pandas=True)


class TooLarge(Exception):
    """A join would make more rows than the process takes on (`Policy.local_matches`): a
    task for Spark. ``product``: the combinations a product of rows sharing no key would
    make (`Budgets.combinations` bounds those; 0: not such a product)."""

    def __init__(self, message: str, product: int = 0) -> None:
        super().__init__(message)
        self.product = product


def check_size(size: int, limit: int | None, product: bool = False) -> None:
    if limit is not None and size > limit:
        raise TooLarge(f"a join of {size:,} matches", size if product else 0)


def spread(first: np.ndarray, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row ``i``'s run of positions ``first[i]``, ..., ``first[i] + runs[i] - 1``, all rows'
    runs one after the other: (positions, rows)."""
    rows = np.repeat(np.arange(len(first)), runs)
    # A run's positions are its output places shifted by where it starts: one repeat (a
    # repeat of each part apart took five times as long).
    positions = np.repeat(first - (np.cumsum(runs) - runs), runs)
    positions += np.arange(len(positions))
    return positions, rows


def _small_range(low: int, high: int, count: int) -> bool:
    """Whether ``count`` integers from ``low`` to ``high`` are dense enough (at most about four
    possible values each) to be addressed by value rather than searched or hashed."""
    return high - low <= 4 * count + 1024


@dataclass(frozen=True)
class SortedKeys:
    """One side of an equi-join, sorted once and searched as often as needed: its keys in
    order and the row each came from; for integers of a small range (at most about four
    values a key), where each value's run starts, so that a key is found by address: a
    binary search per row of a large side jumps all over memory (150 ms for a million
    rows into 250,000 keys, against 10 ms by address)."""

    keys: np.ndarray
    order: np.ndarray
    starts: np.ndarray | None = None
    base: int = 0

    @classmethod
    def of(cls, keys: np.ndarray) -> SortedKeys:
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        if ordered.dtype.kind == "i" and len(ordered):
            base, top = int(ordered[0]), int(ordered[-1])
            if _small_range(base, top, len(ordered)):
                starts = np.searchsorted(ordered, np.arange(base, top + 2), side="left")
                return cls(ordered, order, starts, base)
        return cls(ordered, order)

    def runs(self, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each wanted key's run starts among the sorted keys, and how long it is."""
        if self.starts is None or wanted.dtype.kind != "i":
            first = np.searchsorted(self.keys, wanted, side="left")
            return first, np.searchsorted(self.keys, wanted, side="right") - first
        at = wanted - self.base
        inside = (at >= 0) & (at < len(self.starts) - 1)
        at = np.where(inside, at, 0)
        first = self.starts[at]
        return first, np.where(inside, self.starts[at + 1] - first, 0)


def equal_pairs(
    left: np.ndarray, right: np.ndarray, limit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(i, j)`` with ``left[i] == right[j]``, by ``i`` then ``j`` (the order of a
    left join's rows): ``right`` sorted (stably) and searched for each row of ``left``.
    `TooLarge` past ``limit`` pairs, before any is made."""
    side = SortedKeys.of(right)
    first, runs = side.runs(left)
    check_size(int(runs.sum()), limit)
    at, mine = spread(first, runs)
    return mine, side.order[at]


def cross_pairs(n: int, m: int, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(i, j)`` of ``n`` rows and ``m`` rows, by ``i`` then ``j``."""
    check_size(n * m, limit, product=True)
    return np.repeat(np.arange(n), m), np.tile(np.arange(m), n)


def key_codes(
    left: Sequence[np.ndarray], right: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's key (its values of the columns) as one integer, equal on the two sides
    exactly where the keys are equal: `row_codes` of both sides at once."""
    n, m = len(left[0]), len(right[0])
    both = [np.concatenate([a, b]) for a, b in zip(left, right, strict=True)]
    codes = row_codes(both, n + m)
    return codes[:n], codes[n:]


def row_codes(columns: Sequence[np.ndarray], rows: int) -> np.ndarray:
    """Each of ``rows`` rows' key (its values of ``columns``; none: one key for all) as one
    integer, equal exactly where the keys are equal. Each column's values are numbered, and
    the numbers of the columns so far combined and numbered again, so they stay below the
    number of rows however many columns."""
    codes: np.ndarray | None = None
    for values in columns:
        column, count = numbered(values)
        codes = column if codes is None else pd.factorize(codes * count + column)[0]
    return np.zeros(rows, dtype=np.int64) if codes is None else codes


def distinct(columns: Sequence[np.ndarray], rows: int, keep: str = "first") -> np.ndarray:
    """Which of ``rows`` rows are the first (or, ``keep="last"``, the last) of their key."""
    return ~pd.Series(row_codes(columns, rows)).duplicated(keep=keep).to_numpy()


def groups(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows in order of their key (``codes``; each key's rows in their order) and where
    each key's run starts in that order, as ``np.ufunc.reduceat`` takes them."""
    order = np.argsort(codes, kind="stable")
    return order, run_starts(codes[order])


def run_starts(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal values of ``ordered`` (sorted, or grouped) begins."""
    if not len(ordered):
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])


def among(left: Sequence[np.ndarray], right: Sequence[np.ndarray]) -> np.ndarray:
    """Which rows of ``left`` have a key (their values of the columns) some row of ``right``
    has."""
    if not len(left[0]) or not len(right[0]):
        return np.zeros(len(left[0]), dtype=bool)
    mine, theirs = key_codes(left, right)
    return np.isin(mine, theirs)


def longest(
    key: Sequence[np.ndarray], exp: np.ndarray, tau: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Versions merged per key (``key``: their columns): the row of each key's first
    version, the latest expiry and the earliest ``_tau`` among its versions. None when no
    key comes twice (most often: nothing to merge)."""
    order, starts = groups(row_codes(key, len(exp)))
    if len(starts) == len(exp):
        return None
    return (
        order[starts],
        np.maximum.reduceat(exp[order], starts),
        np.minimum.reduceat(tau[order], starts),
    )


def running_max(values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Each row's greatest value so far among the rows of its key, the rows sorted by key
    (``codes``, each key's rows together): values ranked, then raised by the key's place
    times the number of ranks, so one running maximum over all rows starts again at each
    key."""
    if not len(values):
        return values
    distinct_values, rank = np.unique(values, return_inverse=True)
    place = np.cumsum(np.append(False, codes[1:] != codes[:-1]), dtype=np.int64)
    lifted = place * len(distinct_values) + rank
    return distinct_values[np.maximum.accumulate(lifted) - place * len(distinct_values)]


def last_at_or_before(
    key: np.ndarray, time: np.ndarray, wanted_key: np.ndarray, wanted_time: np.ndarray
) -> np.ndarray:
    """For each wanted ``(key, time)``, the position of the row of that key whose time is
    the latest at or before it (-1: none), the rows sorted by key and then time."""
    times, rank = np.unique(np.concatenate([time, wanted_time]), return_inverse=True)
    span = len(times)
    mine = key.astype(np.int64) * span + rank[: len(time)]
    wanted = wanted_key.astype(np.int64) * span + rank[len(time) :]
    at = np.searchsorted(mine, wanted, side="right") - 1
    found = at >= 0
    found[found] = key[at[found]] == wanted_key[found]
    return np.where(found, at, -1)


def numbered(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Each value's number among the distinct values (equal as keys are), and how many (an
    integer's, in a small range, is its distance from the least, and how many there could
    be: no hash table to build). Text is numbered by Arrow, whose strings carry their
    length; lists (a set's values) by their Python values."""
    if values.dtype.kind == "i" and len(values):
        low, high = int(values.min()), int(values.max())
        if _small_range(low, high, len(values)):  # numbered by value
            return values.astype(np.int64, copy=False) - low, high - low + 1
    if values.dtype != object:
        codes, found = pd.factorize(values, use_na_sentinel=False)
        return codes.astype(np.int64, copy=False), len(found)
    try:
        encoded = pa.array(values, type=pa.string()).dictionary_encode(null_encoding="encode")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        seen: dict[object, int] = {}
        keys = (tuple(v) if isinstance(v, list | np.ndarray) else v for v in values)
        codes = np.fromiter((seen.setdefault(k, len(seen)) for k in keys), np.int64, len(values))
        return codes, len(seen)
    indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return indices, len(encoded.dictionary)


def pairs_on(
    left: Sequence[np.ndarray], right: Sequence[np.ndarray], limit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(i, j)`` whose keys (the columns ``left`` and ``right``, pairwise; at least
    one) are equal, by ``i`` then ``j``. `TooLarge` past ``limit`` pairs."""
    if len(left) == 1 and left[0].dtype.kind in "iuf" and right[0].dtype.kind in "iuf":
        return equal_pairs(left[0], right[0], limit)  # numbers sort and compare as keys do
    mine, theirs = key_codes(left, right)
    return equal_pairs(mine, theirs, limit)
