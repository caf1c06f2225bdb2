"""The rounds of a linear recursive stratum run to its fixpoint, inside one Spark task or
in this process (`stratum._linear_rounds`).

A Spark round costs a job, its stages and a plan built again from the rules, whatever the
size of its data: the closure of a 1,000-node cycle takes 1,001 of them. When every
recursive rule reads its relation once and otherwise only relations of lower strata, and
those are small enough to ship with the task, a partition of the relation can be taken to
its fixpoint on its own: either it holds all of the relation, or the relation is spread on
an argument every rule keeps in place, so no match ever needs a row of another partition
(see ``partitioning``). Each round joins the previous round's new versions with the lower
relations on numpy columns, applies the guards and negations, works out the versions' times
as the Spark plans do (docs/semantics.md, Events and times), and keeps what no known version
covers. Known versions are found by address when their key columns are integers of small
ranges (`_Cells`: a graph's node numbers, one epoch's times), else by a 64-bit hash checked
against the key (`_Known`).

This module imports nothing of the project but the plan's shapes (`plan.linear_rounds`), the
time rules (`plan.time`) and the joins of columns (`column_joins`): all four are shipped to
executors by value.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dagster_pomo.engine.local.column_joins import (
    Cols,
    SortedKeys,
    among,
    concat,
    cross_pairs,
    from_arrow,
    height,
    longest,
    pairs_on,
    spread,
    take,
)
from dagster_pomo.plan.linear_rounds import OPS, LinearAtom, LinearGuard, LinearPlan, LinearRule
from dagster_pomo.plan.time import Ops, head_times

NEW = "__new"  # a version some round made that no round has joined yet
ROUNDS = "__rounds"  # how many rounds the task ran, on each of its rows

NEGATED = 1000  # negated atoms' columns are numbered from here: apart from the positive ones
CHUNK = 1 << 17  # new versions joined at once (see `_fixpoint`)
SALTS = (0x9E3779B97F4A7C15, 0xD1B54A32D192ED03, 0x8CB92BA72F3D8DD7, 0xA0761D6478BD642F)
CELLS = 1 << 23  # the most version keys a task finds by address (8 bytes of lifetime each)
UNKNOWN = np.iinfo(np.int64).min  # the lifetime of a key no version has


class _Restart(Exception):
    """The way versions are found cannot go on: the rounds start again with the next one."""


class _Collision(_Restart):
    """Two different version keys hashed alike."""


class _Outside(_Restart):
    """A version key fell outside the integer ranges its cells were laid out for."""


def _var(name: str) -> str:
    return f"v_{name}"


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise equality in which NaN equals NaN, as it does in a key."""
    eq = a == b
    if a.dtype.kind == "f":
        eq |= np.isnan(a) & np.isnan(b)
    return np.asarray(eq, dtype=bool)


def _atom_cols(atom: LinearAtom, rows: Cols, i: int) -> Cols:
    """The atom's variables (``v_<name>``) and its versions' ``__kt<i>``/``__exp<i>``."""
    keep = np.ones(len(rows["kt"]), dtype=bool)
    for a, b in atom.same:
        keep &= _same(np.asarray(rows[a]), np.asarray(rows[b]))
    cols = {_var(v): np.asarray(rows[c])[keep] for c, v in atom.reads}
    cols[f"__kt{i}"] = np.asarray(rows["kt"], dtype=np.int64)[keep]
    cols[f"__exp{i}"] = np.asarray(rows["exp"], dtype=np.int64)[keep]
    return cols


@dataclass
class _Lower:
    """A lower atom's columns, sorted on the variable it shares with the atoms joined before
    it when there is one (``on``; `SortedKeys`: found by address where it can be), so each
    round finds a row's partners without sorting them again."""

    cols: Cols
    on: tuple[str, ...]
    keys: SortedKeys | None = None
    # The time columns (``__kt<i>``, ``__exp<i>``) whose one value every version has (events
    # stamped alike that never end): kept as that value, not copied into every match.
    same: dict[str, int] = field(default_factory=dict)
    # Each time column's least and greatest value (with ``shared_times``).
    bounds: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, cols: Cols, bound: set[str], shared_times: bool = False) -> _Lower:
        """``cols`` to join on the variables in ``bound``; with ``shared_times``, a time
        column of one value becomes `same` (where the atom has a variable to keep)."""
        same: dict[str, int] = {}
        bounds: dict[str, tuple[int, int]] = {}
        if shared_times and any(c.startswith("v_") for c in cols):
            bounds = {
                c: (int(v.min()), int(v.max())) for c, v in cols.items() if c[:2] == "__" and len(v)
            }
            for c, v in cols.items():
                if c.startswith("__") and len(v) and v.min() == v.max():
                    same[c] = int(v[0])
            cols = {c: v for c, v in cols.items() if c not in same}
        on = tuple(c for c in cols if c.startswith("v_") and c in bound)
        if len(on) != 1:
            return cls(cols, on, None, same, bounds)
        keys = SortedKeys.of(cols[on[0]])
        return cls(take(cols, keys.order), on, keys, same, bounds)

    def within(self, name: str, value: int, latest: bool) -> bool:
        """Whether every version's time ``name`` is at most ``value`` (``latest``: a match's
        time is the latest of its atoms') or at least ``value`` (an end of life, the first):
        a match whose own is ``value`` keeps it whatever version it meets."""
        low, high = self.bounds.get(name, (value + 1, value - 1))
        return high <= value if latest else low >= value

    def join(
        self, left: Cols, carry: Sequence[str] | None = None, quiet: Set[str] = frozenset()
    ) -> Cols:
        """The matches of ``left``'s rows with these: ``left``'s columns (those in ``carry``,
        when given) and these but the ones joined on and those in ``quiet``."""
        if not self.on:
            li, ri = cross_pairs(height(left), height(self.cols))
        elif self.keys is not None:
            ri, li = spread(*self.keys.runs(left[self.on[0]]))
        else:
            li, ri = pairs_on([left[c] for c in self.on], [self.cols[c] for c in self.on])
        out = take(left if carry is None else {c: left[c] for c in carry}, li)
        out.update({c: v[ri] for c, v in self.cols.items() if c not in self.on and c not in quiet})
        return out

    def time(self, match: Cols, name: str) -> np.ndarray | int:
        """A time column of these versions in ``match`` (taken out of it), or the one value
        they all have."""
        return self.same[name] if name in self.same else match.pop(name)


# The time rules' element-wise functions over numpy arrays (see `plan.time.Ops`).
NUMPY_OPS = Ops(
    greatest=np.maximum,
    least=np.minimum,
    where=np.where,
    constant=lambda v, like: np.full(len(like), v, dtype=np.int64),
)


def _side(side: tuple[str, Any], df: Cols) -> Any:
    kind, value = side
    return df[_var(value)] if kind == "var" else value


def _negated(lows: Sequence[_Lower], df: Cols, tau: np.ndarray) -> np.ndarray:
    """Which matches some version of a negated atom, agreeing with them, is alive at their
    time ``tau``: the ones the rule does not make."""
    hit = np.zeros(len(tau), dtype=bool)
    for k, low in enumerate(lows):
        probe = {c: df[c] for c in low.on}
        probe["__row"], probe["__tau"] = np.arange(len(tau)), tau
        met = low.join(probe)
        i = NEGATED + k
        alive = (met[f"__kt{i}"] <= met["__tau"]) & (met[f"__exp{i}"] > met["__tau"])
        hit[met["__row"][alive]] = True
    return hit


def _derive(
    plan: LinearPlan,
    rule: LinearRule,
    lower: Sequence[_Lower],
    delta: Cols,
    start: int,
    end: int,
    negated: Sequence[_Lower] = (),
    met: Sequence[_Met] = (),
) -> Cols | None:
    """The versions ``rule`` makes from the new versions ``delta``, with match times in
    ``[start, end)``: the latest ``kt`` of a match is its time, which it must be alive at,
    where its guards hold and no version of a negated atom agreeing with it is alive.

    The match's time so far (``__kt``, the latest) and end of life (``__exp``, the first)
    are kept up to date join by join; as the one only grows and the other only shrinks, a
    partial match already dead or already past the epoch is dropped at once, as are guards'
    losers as soon as their variables are bound and variables nothing later reads. A
    partial match between two joins that ``met`` (one per such place) has seen already, in
    this round or an earlier one, is dropped too: what it would make is known."""
    df = _atom_cols(rule.recursive, delta, 0)
    # A time every partial match shares (events stamped alike that never end, and lower
    # relations whose versions share theirs) stays one value, not a column copied through
    # every join: the matches' other columns are all there is to gather.
    times: dict[str, np.ndarray | int] = {
        "__kt": _one_value(df.pop("__kt0")),
        "__exp": _one_value(df.pop("__exp0")),
    }
    df.update((c, v) for c, v in times.items() if isinstance(v, np.ndarray))
    guards = list(rule.guards)
    head = {_var(v) for v in rule.head}
    for i in range(len(lower) + 1):
        if i:
            low = lower[i - 1]
            # What the match needs after this join: a variable the head, a later join or a
            # guard still to apply reads (the one joined on is read by the join itself).
            ahead = {c for later in (*lower[i:], *negated) for c in later.on}
            ahead |= head | {_var(v) for g in guards for v in _guard_vars(g)}
            # A time of the match so far that every version of the atom leaves as it is.
            quiet = {
                f"{name}{i}"
                for name, v in times.items()
                if isinstance(v, int) and low.within(f"{name}{i}", v, name == "__kt")
            }
            df = low.join(df, [c for c in df if not c.startswith("v_") or c in ahead], quiet)
            for name, most in (("__kt", np.maximum), ("__exp", np.minimum)):
                if f"{name}{i}" in quiet:
                    continue
                times[name] = most(df.get(name, times[name]), low.time(df, f"{name}{i}"))
                if np.ndim(times[name]):
                    df[name] = times[name]
                else:
                    times[name] = int(times[name])
        kt, exp = df.get("__kt", times["__kt"]), df.get("__exp", times["__exp"])
        keep = (exp > kt) & (kt < end)
        for guard in [g for g in guards if all(_var(v) in df for v in _guard_vars(g))]:
            guards.remove(guard)
            keep = keep & np.asarray(OPS[guard.op](_side(guard.left, df), _side(guard.right, df)))
        if not np.ndim(keep) and not keep:
            return None
        later = {c for low in (*lower[i:], *negated) for c in low.on}
        later |= {_var(v) for g in guards for v in _guard_vars(g)}
        cols = [c for c in df if not c.startswith("v_") or c in head or c in later]
        if not cols:  # a column to count the matches by
            cols = ["__kt"]
            df["__kt"] = times["__kt"] = np.full(height(df), times["__kt"], dtype=np.int64)
        kept = {c: df[c] for c in cols}
        df = kept if not np.ndim(keep) or keep.all() else take(kept, keep)
        if 0 < i <= len(met) and (rows := met[i - 1].unmet(df, times)) is not None:
            df = take(df, rows)
        if not height(df):
            return None
    n = height(df)
    tau = df.get("__kt", times["__kt"])
    alive_until = df.get("__exp", times["__exp"])
    tau = tau if np.ndim(tau) else np.full(n, tau, dtype=np.int64)
    alive_until = alive_until if np.ndim(alive_until) else np.full(n, alive_until, dtype=np.int64)
    ok = tau >= start
    if negated and ok.any():
        ok &= ~_negated(negated, df, tau)
    if not ok.any():
        return None
    if ok.all():  # most often: no copy of millions of rows for nothing
        out = {c: df[_var(v)] for c, v in zip(plan.columns, rule.head, strict=True)}
    else:
        tau, alive_until = tau[ok], alive_until[ok]
        out = {c: df[_var(v)][ok] for c, v in zip(plan.columns, rule.head, strict=True)}
    kt, exp = head_times(tau, tau, alive_until, plan.lifetime, NUMPY_OPS)
    out.update(t=tau, kt=kt, exp=exp, _tau=tau)
    return out


def _one_value(column: np.ndarray) -> np.ndarray | int:
    """``column``'s one value when every row has it, else the column."""
    if len(column) and column.min() == column.max():
        return int(column[0])
    return column


def _guard_vars(guard: LinearGuard) -> list[str]:
    return [value for kind, value in (guard.left, guard.right) if kind == "var"]


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """A 64-bit finalizer (splitmix64): nearby integers land far apart."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def _hash(rows: Cols, key: Sequence[str], salt: int) -> np.ndarray:
    """A 64-bit hash of each row's ``key`` columns; integers by arithmetic, other types by
    pandas' hashing of the values."""
    h = np.full(height(rows), salt, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in key:
            col = rows[c]
            if col.dtype.kind in "iu":
                part = col.astype(np.int64, copy=False).view(np.uint64)
            else:
                part = pd.util.hash_array(col, categorize=False)
            h = _mix(h ^ _mix(part + np.uint64(salt)))
    return h


class _Cells:
    """The version keys known so far when all their columns are integers of small ranges: a
    key's address (its columns as digits of mixed radix) is the cell holding its longest
    lifetime, so a key is found by one lookup, exactly, with no sort and no hash to doubt.
    The key's columns are the relation's and ``kt``: a version a round makes is stamped
    when it is known (``t`` = ``kt`` = its match time), so rows are only taken when that
    holds. Any row outside the ranges, or not so stamped, raises _Outside (and the rounds
    fall back on `_Known`)."""

    def __init__(self, key: Sequence[str], ranges: Sequence[tuple[int, int]]) -> None:
        self.key, self.lows = list(key), [lo for lo, _ in ranges]
        self.spans = [hi - lo + 1 for lo, hi in ranges]
        cells = int(np.prod(self.spans))
        self.exp = np.full(cells, UNKNOWN, dtype=np.int64)
        self.claim = np.empty(cells, dtype=np.int32)  # a scratch: which row a cell went to
        self.size = 0

    def _address(self, rows: Cols) -> np.ndarray:
        at = _addresses(rows, self.key, self.lows, self.spans)
        if at is None:
            raise _Outside
        return at

    def add(self, rows: Cols) -> tuple[Cols, bool]:
        """As `_Known.add`. The rows that beat their key's known lifetime raise it to their
        greatest; of those reaching it, one per key is kept (whichever claims the cell)."""
        t = rows["t"]
        if not all(rows[c] is t or np.array_equal(rows[c], t) for c in ("kt", "_tau")):
            raise _Outside
        at, exp = self._address(rows), rows["exp"]
        beat = np.flatnonzero(exp > self.exp[at])
        at, exp = at[beat], exp[beat]
        before = self.exp[at]
        if len(exp) and exp.min() == exp.max():  # one lifetime (often: none ends): each row
            self.exp[at] = exp[0]  # reaches it, set at once (`ufunc.at` took 6 times as long)
            top = np.arange(len(at))
        else:
            np.maximum.at(self.exp, at, exp)
            top = np.flatnonzero(exp == self.exp[at])
        one = top[_one_per_cell(self.claim, at[top])]
        fresh = before[one] == UNKNOWN
        self.size += int(fresh.sum())
        return take(rows, beat[one]), not fresh.all()


class _Met:
    """The partial matches of a rule met so far at one place between its joins, where what is
    left of a match is integers of a small range and its times are one value: a match met
    again (the same variables and times) would make what the first one made. Same
    generation's `sg(x, y) := edge(a, x) ^ sg(a, b) ^ edge(b, y)` makes each `(x, b)` from
    many `(a, b)`, and goes on from each `(x, b)` once rather than every time (on a random
    graph of 2,000 nodes and 8,000 edges, 16 million matches of its second join rather than
    62 million)."""

    TIMES = 4  # the most (kt, exp) pairs met; matches of other times go on unchecked

    def __init__(self, low: int, span: int) -> None:
        self.low, self.span = low, span
        self.seen: dict[tuple[int, int], np.ndarray] = {}
        self.claim: np.ndarray | None = None  # a scratch: which row a cell went to

    def unmet(self, df: Cols, times: Mapping[str, np.ndarray | int]) -> np.ndarray | None:
        """The rows of ``df`` not met before, now met (one per match); None to keep all."""
        kt, exp = times["__kt"], times["__exp"]
        if not isinstance(kt, int) or not isinstance(exp, int) or not df:
            return None
        key = list(df)
        if not all(c.startswith("v_") and df[c].dtype.kind in "iu" for c in key):
            return None
        if float(self.span) ** len(key) > CELLS:
            return None
        seen = self.seen.get((kt, exp))
        if seen is None:
            if len(self.seen) >= self.TIMES:
                return None
            seen = self.seen[(kt, exp)] = np.zeros(self.span ** len(key), dtype=bool)
        at = _addresses(df, key, [self.low] * len(key), [self.span] * len(key))
        if at is None:
            return None
        rows = np.flatnonzero(~seen[at])
        at = at[rows]
        seen[at] = True
        if self.claim is None:
            self.claim = np.empty(len(seen), dtype=np.int32)
        return rows[_one_per_cell(self.claim, at)]


def _addresses(
    rows: Cols, key: Sequence[str], lows: Sequence[int], spans: Sequence[int]
) -> np.ndarray | None:
    """Each row's cell: its ``key`` columns as digits of mixed radix (the first the least
    significant; a column of one value adds nothing), made in place; None when a value
    falls outside its column's range."""
    at: np.ndarray | None = None
    stride = 1
    for c, lo, span in zip(key, lows, spans, strict=True):
        col = rows[c].astype(np.int64, copy=False)
        if len(col) and (col.min() < lo or col.max() >= lo + span):
            return None
        if span != 1:
            digit = col - lo
            if stride != 1:
                digit *= stride
            if at is None:
                at = digit
            else:
                at += digit
        stride *= span
    return np.zeros(height(rows), dtype=np.int64) if at is None else at


def _one_per_cell(claim: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Of rows landing in cells ``at``, one per cell (whichever claims it last), as a mask;
    ``claim`` is a scratch array of the cells."""
    mine = np.arange(len(at), dtype=np.int32)
    claim[at] = mine
    return claim[at] == mine


class _Known:
    """The version keys known so far and their longest lifetimes: runs sorted on a 64-bit hash
    of the key, merged as they grow (few runs, each row merged a few times). A hash is only
    trusted once the key's columns compare equal; two keys hashing alike raise _Collision."""

    def __init__(self, key: Sequence[str], salt: int) -> None:
        self.key, self.salt = list(key), salt
        self.runs: list[tuple[np.ndarray, Cols]] = []  # (sorted hashes, key columns and exp)

    @property
    def size(self) -> int:
        return sum(len(h) for h, _ in self.runs)

    def _check(self, a: Cols, at: np.ndarray, b: Cols, bt: np.ndarray) -> None:
        """Rows ``at`` of ``a`` hashed like rows ``bt`` of ``b``: their keys must be equal."""
        if not all(_same(a[c][at], b[c][bt]).all() for c in self.key):
            raise _Collision

    def add(self, rows: Cols) -> tuple[Cols, bool]:
        """The rows no known version covers (one per key, the longest-living), now known; and
        whether one of them outlives a known version of its key. Works on row numbers and
        gathers the rows once, at the end."""
        h = _hash(rows, self.key, self.salt)
        order = np.argsort(h)
        h = h[order]
        exp, tau = rows["exp"][order], None
        first = np.ones(len(h), dtype=bool)
        first[1:] = h[1:] != h[:-1]
        if first.all():
            idx = order
        else:  # one row per key: the longest-living, with the earliest match time
            starts, repeat = np.flatnonzero(first), np.flatnonzero(~first)
            self._check(rows, order[repeat], rows, order[repeat - 1])
            exp = np.maximum.reduceat(exp, starts)
            tau = np.minimum.reduceat(rows["_tau"][order], starts)
            idx, h = order[starts], h[starts]
        found = np.zeros(len(h), dtype=bool)
        longer = np.zeros(len(h), dtype=bool)
        for hashes, run in self.runs:
            pos = np.minimum(np.searchsorted(hashes, h), len(hashes) - 1)
            hit = np.flatnonzero(hashes[pos] == h)
            if not len(hit):
                continue
            at = pos[hit]
            self._check(run, at, rows, idx[hit])
            found[hit] = True
            outlives = exp[hit] > run["exp"][at]
            run["exp"][at[outlives]] = exp[hit][outlives]
            longer[hit[outlives]] = True
        unseen = ~found
        if unseen.any():
            run = {c: rows[c][idx[unseen]] for c in self.key}
            run["exp"] = exp[unseen]
            self._push(h[unseen], run)
        keep = unseen | longer
        out = take(rows, idx[keep])
        out["exp"] = exp[keep]
        if tau is not None:
            out["_tau"] = tau[keep]
        return out, bool(longer.any())

    def _push(self, h: np.ndarray, run: Cols) -> None:
        self.runs.append((h, run))
        while len(self.runs) > 1 and len(self.runs[-2][0]) <= 2 * len(self.runs[-1][0]):
            (h1, a), (h2, b) = self.runs.pop(), self.runs.pop()
            both = np.concatenate([h2, h1])
            order = np.argsort(both, kind="stable")  # two sorted runs: a merge
            self.runs.append((both[order], take(concat([b, a]), order)))


def fixpoint(
    plan: LinearPlan,
    rows: Cols,
    lower: Mapping[str, Cols],
    start: int,
    end: int,
    budget: int,
    rounds: int = 1 << 62,
) -> tuple[pa.Table, int]:
    """Run ``plan``'s rules on ``rows`` (stored columns and ``__new``: the versions the next
    round joins) until no round makes a version that no known one covers (same key, living
    at least as long), until more than ``budget`` versions are known, or for at most
    ``rounds`` rounds.

    Returns one row per version key (the longest-living; ``__new`` on those no round has
    joined yet, which is none at the fixpoint) and the number of rounds run."""
    for known in _ways(plan, rows, lower):
        try:
            return _fixpoint(plan, rows, lower, (start, end), (budget, rounds), known)
        except _Restart:
            continue
    raise RuntimeError(f"version keys of {plan.relation} hashed alike under every salt")


def _ways(
    plan: LinearPlan, rows: Cols, lower: Mapping[str, Cols]
) -> Iterator[Callable[[], _Cells | _Known]]:
    """How the rounds find known versions, best first: by address when every key column is an
    integer and the ranges they can take hold at most CELLS keys, else by hash, salt by salt.
    A version's arguments come from the given rows or the lower relations, its time is some
    version's ``kt``: the ranges are those of all such columns."""
    frames = [rows, *lower.values()]
    if all(rows[c].dtype.kind in "iu" for c in plan.key) and height(rows):
        ranges = [_arguments(rows, lower)] * len(plan.columns)
        ranges.append(_range([f[c] for f in frames for c in ("t", "kt")]))
        if np.prod([float(hi - lo + 1) for lo, hi in ranges]) <= CELLS:
            yield lambda: _Cells([*plan.columns, "kt"], ranges)
    for salt in SALTS:
        yield lambda salt=salt: _Known(plan.key, salt)


def _arguments(rows: Cols, lower: Mapping[str, Cols]) -> tuple[int, int]:
    """The smallest and largest integer argument of ``rows`` and the lower relations: the
    range of every integer variable of the rules and of every version they make."""
    frames = (rows, *lower.values())
    values = [f[c] for f in frames for c in f if c not in ("t", "kt", "exp", "_tau", NEW)]
    return _range([v for v in values if v.dtype.kind in "iu"])


def _range(columns: Sequence[np.ndarray]) -> tuple[int, int]:
    """The smallest and largest value of some integer columns."""
    filled = [c for c in columns if len(c)]
    if not filled:
        return 0, 0
    return int(min(c.min() for c in filled)), int(max(c.max() for c in filled))


def _fixpoint(
    plan: LinearPlan,
    rows: Cols,
    lower: Mapping[str, Cols],
    window: tuple[int, int],
    budgets: tuple[int, int],
    way: Callable[[], _Cells | _Known],
) -> tuple[pa.Table, int]:
    start, end = window
    budget, most = budgets
    frames, negations = [], []
    for rule in plan.rules:
        bound = {_var(v) for _, v in rule.recursive.reads}
        lows = []
        for i, atom in enumerate(rule.others):
            low = _Lower.of(_atom_cols(atom, lower[atom.relation], i + 1), bound, True)
            bound |= {c for c in low.cols if c.startswith("v_")}
            lows.append(low)
        frames.append(lows)
        negations.append(
            [
                _Lower.of(_atom_cols(a, lower[a.relation], NEGATED + k), bound)
                for k, a in enumerate(rule.negated)
            ]
        )
    low, high = _arguments(rows, lower)
    met = [[_Met(low, high - low + 1) for _ in lows[1:]] for lows in frames]
    columns = [c for c in rows if c != NEW]
    known = way()
    given = {c: rows[c] for c in columns}
    waiting = np.asarray(rows[NEW], dtype=bool)
    # Versions of one key may repeat across the pieces that hold the relation: the longest.
    first, merge = known.add(given)
    kept = [first]
    delta = take(first, np.flatnonzero(_new_among(first, given, waiting, plan.key)))
    rounds = 0
    while height(delta) and known.size <= budget and rounds < most:
        rounds += 1
        fresh = []
        # A slice of the new versions at a time: what one round makes from them can be many
        # times their number, and only a slice's worth is held at once. What a slice finds is
        # known at once, so later slices only add what is still new.
        for at in range(0, height(delta), CHUNK):
            part = {c: v[at : at + CHUNK] for c, v in delta.items()}
            made = [
                m
                for rule, lows, nots, places in zip(plan.rules, frames, negations, met, strict=True)
                if (m := _derive(plan, rule, lows, part, start, end, nots, places)) is not None
            ]
            if made:
                found, longer = known.add(concat(made))
                merge |= longer
                fresh.append(found)
        delta = concat(fresh) if fresh else {}
        if fresh:
            kept.append(delta)
    # The rounds' columns as they are, end to end (a copy of millions of rows costs more
    # than a round here).
    out = _table([k for k in kept if height(k)] or kept[:1], columns)
    if merge:  # some key got a longer-living version: keep that one, with the earliest _tau
        key = [out[c].to_numpy(zero_copy_only=False) for c in plan.key]
        merged = longest(key, out["exp"].to_numpy(), out["_tau"].to_numpy())
        if merged is not None:
            rows, exp, tau = merged
            out = out.take(rows)
            out = out.set_column(out.schema.get_field_index("exp"), "exp", pa.array(exp))
            out = out.set_column(out.schema.get_field_index("_tau"), "_tau", pa.array(tau))
    waiting = np.zeros(out.num_rows, dtype=bool)
    if height(delta):  # the versions of the keys still to join
        keys = [out[c].to_numpy(zero_copy_only=False) for c in plan.key]
        waiting = among(keys, [delta[c] for c in plan.key])
    return out.append_column(NEW, pa.array(waiting)), rounds


def _table(parts: Sequence[Cols], columns: list[str]) -> pa.Table:
    """``parts`` one after the other as a table of ``columns``, their numpy arrays not copied
    where Arrow can take them as they are (numbers)."""
    tables = [pa.table({c: p[c] for c in columns}) for p in parts]
    return pa.concat_tables(tables, promote_options="default")


def _new_among(kept: Cols, given: Cols, waiting: np.ndarray, key: list[str]) -> np.ndarray:
    """Which of the ``kept`` versions came from a ``waiting`` row of ``given`` (the ones the
    first round of the tasks joins)."""
    if waiting.all():
        return np.ones(height(kept), dtype=bool)
    if not waiting.any():
        return np.zeros(height(kept), dtype=bool)
    columns = [*key, "exp"]
    return among([kept[c] for c in columns], [given[c][waiting] for c in columns])


def task(
    plan: LinearPlan,
    lower: Mapping[str, pa.Table],
    schema: pa.Schema,
    start: int,
    end: int,
    budget: int,
    folder: str | None = None,
    rounds: int = 1 << 62,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function ``mapInArrow`` runs on each partition of the relation's rows: their
    fixpoint (or its first ``rounds`` rounds), in ``schema`` (the stored columns, ``__new``
    and ``__rounds``). Rows that went through such tasks before may carry ``__rounds``, the
    rounds that led to them: the task goes on from the most of those (its rounds count
    towards ``rounds`` and its rows carry the total).

    With a ``folder`` (local to the task), each task writes its rows there as one Parquet
    file and returns only a `SUMMARY` row: what Spark would spend taking millions of rows
    into the JVM and writing them again is saved. The stored columns only, unless versions
    wait to be joined (then ``__new`` too: the files are read back, not kept)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = list(batches)
        if not got or not any(b.num_rows for b in got):
            return
        given = pa.Table.from_batches(got)
        before = 0
        if ROUNDS in given.column_names:
            before = int(pc.max(given[ROUNDS]).as_py() or 0)
            given = given.drop_columns([ROUNDS])
        rows = from_arrow(given)
        frames = {name: from_arrow(table) for name, table in lower.items()}
        out, ran = fixpoint(plan, rows, frames, start, end, budget, rounds - before)
        ran += before
        if folder is None:
            out = out.append_column(ROUNDS, pa.array(np.full(out.num_rows, ran)))
            yield from as_stored(out, schema).to_batches(max_chunksize=1 << 16)
            return
        waiting = int(np.count_nonzero(out[NEW].to_numpy()))
        names = [n for n in schema.names if n != ROUNDS and (n != NEW or waiting)]
        _write(as_stored(out, pa.schema([schema.field(n) for n in names])), folder)
        yield pa.RecordBatch.from_pylist(
            [{"rows": out.num_rows, "waiting": waiting, "rounds": ran}], schema=SUMMARY
        )

    return run


def as_stored(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The columns of ``schema`` from ``table``, in its types."""
    return table.select(schema.names).cast(schema)


SUMMARY = pa.schema([("rows", pa.int64()), ("waiting", pa.int64()), ("rounds", pa.int64())])


def _write(table: pa.Table, folder: str) -> None:
    """``table`` as the task's one Parquet file in ``folder``, named after its partition, so a
    retried task replaces what an earlier attempt wrote; the name appears only once the file
    is whole."""
    from pyspark import TaskContext  # present where tasks run

    context = TaskContext.get()
    part = context.partitionId() if context is not None else 0
    partial = os.path.join(folder, f".part-{part:05d}-{uuid.uuid4().hex}.tmp")
    pq.write_table(table, partial, compression="snappy")
    os.replace(partial, os.path.join(folder, f"part-{part:05d}.snappy.parquet"))
