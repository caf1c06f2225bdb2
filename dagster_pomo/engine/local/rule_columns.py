"""One rule over versions held as numpy columns, as
:mod:`dagster_pomo.engine.spark.rule_frames` plans it.

The same steps as the Spark plans, on the epoch's few rows in this process: positive atoms
become renamed columns and join on shared variables (or on buckets of a band their guards
keep them in), ``where`` adds columns, guards filter, ``tau`` is the largest ``kt``,
negations drop the matches some agreeing version is alive for, and the head computes ``t``,
``kt`` and ``exp`` (docs/semantics.md, Events and times). Aggregates cut each combination of
events into segments and hand them to `sliding_aggregates`, which the Spark plans run in
their tasks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from dagster_pomo.engine import interpreter, lattices
from dagster_pomo.engine.cid import cids
from dagster_pomo.engine.local import provenance, sliding_aggregates
from dagster_pomo.engine.local.column_joins import (
    Cols,
    concat,
    cross_pairs,
    distinct,
    equal_pairs,
    groups,
    height,
    key_codes,
    last_at_or_before,
    longest,
    objects,
    pairs_on,
    row_codes,
    running_max,
    take,
)
from dagster_pomo.engine.local.exprs import (
    NUMPY,
    Col,
    Vec,
    cast,
    present,
    truthy,
    value,
)
from dagster_pomo.engine.local.linear_fixpoint import NUMPY_OPS
from dagster_pomo.engine.versions import value_order
from dagster_pomo.lang.interpret import Value
from dagster_pomo.plan.band_joins import Band
from dagster_pomo.plan.exprs import Compare, Expr, equals
from dagster_pomo.plan.exprs import Var as ExprVar
from dagster_pomo.plan.rules import (
    BodyAggregate,
    Choice,
    Head,
    Negation,
    RulePlan,
    Scan,
    grouped_head_of,
)
from dagster_pomo.plan.scans import CID
from dagster_pomo.plan.schema import PROV, Schema, row_columns
from dagster_pomo.plan.steps import (
    AntiJoin,
    Check,
    Choose,
    Filter,
    Let,
    Make,
    Provenance,
    Read,
    Summarise,
)
from dagster_pomo.plan.steps import Window as Within
from dagster_pomo.plan.time import head_times
from dagster_pomo.timeline import NEVER, PAST, Epoch


def rule_supported(plan: RulePlan) -> bool:
    """Whether this module works a rule out: its head's values fit their columns, and its
    aggregates are over numbers, the least or greatest text, sets (`collect`) or a
    lattice's merge (expressions it works out as the language does, as Spark's plans do).
    Read from the types the plan inferred, not from the rule's source."""
    for agg in plan.body_aggregates:
        if agg.arg_type == "str" and agg.function not in ("min", "max"):
            return False
    for found, (_, _, typ) in zip(plan.head.found, plan.head.args, strict=True):
        if found not in (None, typ) and {found, typ} != {"int", "float"}:
            return False
    if plan.aggregate is None:
        return True
    kinds = zip(plan.aggregate.functions, plan.aggregate.arg_types, strict=True)
    folded = ("collect", "lattice")
    return all(fn in folded or _summable(fn, kind) for (fn, *_), kind in kinds)


def _summable(function: str, kind: str | None) -> bool:
    """Whether a head aggregate's values are what this module sweeps: numbers, or text for
    the least or greatest."""
    return kind in (None, "int", "float") or (kind == "str" and function in ("min", "max"))


# ---------------------------------------------------------------------------- matches


@dataclass
class Matches:
    """Matches as columns: variables, and ``__kt<i>``/``__exp<i>`` per atom (and
    ``__k<i>_<j>``, the atom's event, when asked for); the rows the guards keep (``keep``,
    None: all), taken by `valid` with its own, so that many columns are cut once."""

    df: Cols
    env: dict[str, Col]
    atoms: int
    keys: list[str]
    keep: np.ndarray | None = None


def _select(cols: Mapping[str, np.ndarray], names: Sequence[str]) -> Cols:
    return {c: cols[c] for c in names}


def _atom_frame(
    scan: Scan, df: Mapping[str, np.ndarray], want_key: bool
) -> tuple[Cols, dict[str, Col], list[tuple[Expr, str, str]], list[str]]:
    i = scan.index
    if scan.reads_cid:
        columns = [df[c].tolist() for c in scan.identity]
        df = {**df, CID: objects(cids(scan.relation, columns, df["t"].tolist()))}
    env = {name: Col(col, typ) for name, col, typ in scan.binds}
    keep = np.ones(height(df), dtype=bool)
    for a, b in scan.same:
        keep &= df[a] == df[b]
    for const, col, typ in scan.constants:
        keep &= matched(const, col, typ, df, {})
    checks = [(arg, f"__x{i}_{j}", typ) for j, arg, _, typ in scan.checks]
    out = {f"v_{name}": df[c.column] for name, c in env.items()}
    out.update({f"__x{i}_{j}": df[col] for j, _, col, _ in scan.checks})
    out[f"__kt{i}"] = df["kt"]
    out[f"__exp{i}"] = df["exp"]
    if scan.provenance == "stored":
        out[f"__prov{i}"] = df[PROV]
    elif scan.provenance == "own":
        out[f"__prov{i}"] = provenance.own(scan.relation, [df[c] for c in scan.identity], df["t"])
    keys: list[str] = []
    if want_key:
        for c in scan.key:
            keys.append(f"__k{i}_{c}")
            out[keys[-1]] = df[c]
    return (
        out if keep.all() else take(out, keep),
        {name: Col(f"v_{name}", c.typ) for name, c in env.items()},
        checks,
        keys,
    )


def _checked(
    checks: Sequence[tuple[Expr, str, str]], df: Cols, env: Mapping[str, Col]
) -> np.ndarray:
    """Which rows' expression arguments equal the columns they are matched against."""
    keep = np.ones(height(df), dtype=bool)
    for expr, column, typ in checks:
        keep &= matched(expr, column, typ, df, env)
    return keep


def matched(expr: Expr, column: str, typ: str, df: Cols, env: Mapping[str, Col]) -> np.ndarray:
    """Where ``expr`` equals ``df``'s ``column`` of type ``typ`` (`exprs.equals`: never, for
    values that cannot be compared)."""
    guard = equals(expr, ExprVar(column, typ))
    return truthy(value(guard, df, {**env, column: Col(column, typ)}))


def summarise(
    step: Summarise,
    joined: Cols,
    sources: Sequence[Cols],
    window: tuple[int, int],
    limit: int,
) -> Cols:
    """As :func:`dagster_pomo.engine.spark.rule_frames.summarise`: the body aggregates as one more
    atom, a row per match and piece."""
    a, b = window
    n, rows = step.scans, height(joined)
    if n:
        tau, mexp = _tau(joined, n), _min_exp(joined, n)
    else:
        tau, mexp = np.full(rows, PAST), np.full(rows, NEVER)
    groups_of = list(dict.fromkeys(f"v_{v}" for agg in step.aggregates for v in agg.group))
    joined = {**joined, "__mtau": tau, "__mmexp": mexp}
    key = [*groups_of, "__mtau", "__mmexp"]
    lives = (mexp > tau) & (tau < b) & (mexp > a)
    asked = _distinct(take(_select(joined, key), lives))
    at = asked["__mtau"]
    first = take(asked, (at >= a) & (at < b))
    parts = [{**first, "__at": first["__mtau"]}]
    summarised = []
    for agg, source in zip(step.aggregates, sources, strict=True):
        events, same = _summarised(agg, source, a, b)
        summarised.append((agg, events, same))
        changes = {c: np.concatenate([events[c], events[c]]) for c in same.values()}
        changes["__at"] = np.concatenate([events["__ekt"], events["__eexp"]])
        x = changes["__at"]
        changes = _distinct(take(changes, (x >= a) & (x < b)))
        later = _pair(asked, changes, same, limit)
        x = later["__at"]
        parts.append(take(later, (later["__mtau"] < x) & (x < later["__mmexp"])))
    pieces = _distinct(concat([_select(p, [*key, "__at"]) for p in parts]))
    until = pieces["__mmexp"]
    for agg, events, same in summarised:
        numbered = {**_select(pieces, [*key, "__at"]), "__piece": np.arange(height(pieces))}
        covered = _pair(numbered, events, same, limit)
        x = covered["__at"]
        covered = take(covered, (covered["__ekt"] <= x) & (x < covered["__eexp"]))
        event = [covered[c] for c in covered if c.startswith("__k")]
        found, least_found, at = _per_piece(
            agg.function,
            covered["__piece"],
            row_codes(event, height(covered)),
            covered["__eexp"],
            covered["__val"],
        )
        has = np.zeros(height(pieces), dtype=bool)
        has[at] = True
        res = np.zeros(height(pieces), dtype=found.dtype)
        res[at] = found
        least = np.full(height(pieces), NEVER, dtype=np.int64)
        least[at] = least_found
        if agg.empty is None:  # a piece no event covers has no value
            pieces, res, least, until = take(pieces, has), res[has], least[has], until[has]
            has = has[has]
        until = np.minimum(until, least)
        result = np.where(has, res, agg.empty) if agg.empty is not None else res
        pieces = {**pieces, f"v_{agg.var}": result.astype(NUMPY[agg.type])}
    i = n  # the atom after the scans
    pieces = {**pieces, f"__kt{i}": pieces["__at"], f"__exp{i}": until}
    del pieces["__at"]
    out = join_on(joined, pieces, key, limit)
    del out["__mtau"], out["__mmexp"]
    return out


def _per_piece(
    function: str, piece: np.ndarray, event: np.ndarray, exp: np.ndarray, val: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A body aggregate per piece over the events covering it, each event once (its versions
    counted once: the latest expiry and the greatest value among them): the aggregate, the
    least expiry of those events, and which pieces they are (in order)."""
    if not len(piece):
        return np.zeros(0, dtype=val.dtype), np.zeros(0, dtype=np.int64), piece
    order, starts = groups(row_codes([piece, event], len(piece)))
    piece = piece[order][starts]
    exp = np.maximum.reduceat(exp[order], starts)
    val = np.maximum.reduceat(val[order], starts)
    order, starts = groups(piece)
    piece, exp, val = piece[order], exp[order], val[order]
    count = np.diff(np.append(starts, len(piece)))
    if function == "count":
        found = count.astype(np.int64)
    elif function == "min":
        found = np.minimum.reduceat(val, starts)
    elif function == "max":
        found = np.maximum.reduceat(val, starts)
    else:
        total = np.add.reduceat(val, starts)
        found = total / count if function == "average" else total
    return found, np.minimum.reduceat(exp, starts), piece[starts]


def _distinct(df: Cols, columns: Sequence[str] | None = None) -> Cols:
    """The first row of each key of ``df`` (its values of ``columns``, by default all), in
    order (`column_joins.distinct`: text compared whole)."""
    names = list(df if columns is None else columns)
    return take(df, distinct([df[c] for c in names], height(df)))


def _pair(left: Cols, right: Cols, same: Mapping[str, str], limit: int) -> Cols:
    """Every pair of a row of ``left`` and one of ``right`` in the same group (``same``: a
    left column and the right one equal to it)."""
    return join_on(left, right, list(same), limit, list(same.values()))


def join_on(
    left: Cols,
    right: Cols,
    on: Sequence[str],
    limit: int | None,
    right_on: Sequence[str] | None = None,
) -> Cols:
    """The rows of ``left`` and ``right`` whose columns ``on`` (``right_on`` in ``right``,
    by default the same names) are equal, side by side, in ``left``'s order; the right's
    key columns left out. With no column, every pair. `TooLarge` past ``limit`` rows."""
    theirs = list(on if right_on is None else right_on)
    if on:
        mine, other = pairs_on([left[c] for c in on], [right[c] for c in theirs], limit)
    else:
        mine, other = cross_pairs(height(left), height(right), limit)
    rest = {c: v for c, v in right.items() if c not in theirs}
    return paired(left, rest, mine, other)


def _summarised(agg: BodyAggregate, source: Cols, a: int, b: int) -> tuple[Cols, dict[str, str]]:
    """As :func:`dagster_pomo.engine.spark.rule_frames._summarised`: the versions a body
    aggregate summarises that may matter to ``[a, b)``, with their groups renamed apart."""
    i = agg.scan.index
    frame, env, checks, keys = _atom_frame(agg.scan, source, want_key=True)
    keep = _checked(checks, frame, env)
    if agg.arg is None:
        values = np.ones(height(frame), dtype=np.int64)
    else:
        vec = value(agg.arg, frame, env)
        values, keep = vec.values, keep & present(vec)
    renamed = {f"v_{g}": f"__e{i}_{j}" for j, g in enumerate(agg.group)}
    events = {
        **{e: frame[g] for g, e in renamed.items()},
        "__val": values,
        "__ekt": frame[f"__kt{i}"],
        "__eexp": frame[f"__exp{i}"],
        **{k: frame[k] for k in keys},
    }
    kt, exp = events["__ekt"], events["__eexp"]
    return take(events, keep & (kt < b) & (exp >= a)), renamed


def _band_join(
    left: Cols,
    left_env: Mapping[str, Col],
    right: Cols,
    right_env: Mapping[str, Col],
    band: Band | None,
    limit: int,
) -> Cols:
    """Frames sharing no variable: paired within buckets of a band their guards keep two
    integer variables in (the guards still decide), else every pair."""
    if band is not None:
        x, y = left_env[band.left], right_env[band.right]
        width, first, last = band.buckets()
        offsets = np.arange(first, last + 1, dtype=np.int64)
        yb = right[y.column] // width
        rows = np.repeat(np.arange(height(right)), len(offsets))
        bands = np.repeat(yb, len(offsets)) + np.tile(offsets, height(right))
        mine, theirs = equal_pairs(left[x.column] // width, bands, limit)
        return paired(left, right, mine, rows[theirs])
    return join_on(left, right, [], limit)


def paired(left: Cols, right: Cols, mine: np.ndarray, theirs: np.ndarray) -> Cols:
    """Rows ``mine`` of ``left`` beside rows ``theirs`` of ``right`` (no column in both)."""
    return {**take(left, mine), **take(right, theirs)}


def _tau(df: Cols, atoms: int) -> np.ndarray:
    """A match's time: the latest ``kt`` of its first ``atoms`` atoms."""
    kts = (df[f"__kt{i}"] for i in range(atoms))
    return functools.reduce(np.maximum, kts).astype(np.int64, copy=False)


def _min_exp(df: Cols, atoms: int) -> np.ndarray:
    """When a match dies: the first ``exp`` of its first ``atoms`` atoms."""
    exps = (df[f"__exp{i}"] for i in range(atoms))
    return functools.reduce(np.minimum, exps).astype(np.int64, copy=False)


def anti_join(
    df: Cols,
    negation: Negation,
    source: Cols,
    env: Mapping[str, Col],
    alive: tuple[int, int] | None = None,
) -> Cols:
    """Drop the rows of ``df`` for which some version of ``atom`` agreeing with them is
    alive at ``__tau`` (made by then, expiring after): per agreeing group, the latest
    expiry among the versions made by ``tau`` is after it. ``alive=(start, end)``: alive
    at some instant of that window instead (made before ``end``, expiring after
    ``start``), for every row alike."""
    if not height(df) or not height(source):
        return df
    left: list[np.ndarray] = []
    right: list[np.ndarray] = []
    has = np.ones(height(df), dtype=bool)
    for arg, col, typ in negation.columns:
        if arg is None:
            continue
        guard = equals(arg, ExprVar(col, typ))
        if not isinstance(guard, Compare):
            return df  # no version can agree
        mine = value(guard.left, df, env)
        stored = value(guard.right, source, {col: Col(col, typ)})
        has &= mine.valid()
        left.append(mine.values)
        right.append(stored.values)
    # The agreeing values as one number, on both sides (`key_codes`); then, per number,
    # the versions by time, each with the latest expiry so far; a row meets the last one
    # made by its tau, alive if that expiry is after it.
    if left:
        mine_by, theirs_by = key_codes(left, right)
    else:
        mine_by, theirs_by = np.zeros(height(df), np.int64), np.zeros(height(source), np.int64)
    order = np.lexsort((source["kt"], theirs_by))
    by, kt = theirs_by[order], source["kt"][order]
    latest = running_max(source["exp"][order], by)
    if alive is None:
        made_by = after = df["__tau"]
    else:
        made_by = np.full(height(df), alive[1] - 1, np.int64)
        after = np.full(height(df), alive[0], np.int64)
    at = last_at_or_before(by, kt, mine_by[has], made_by[has])
    found = np.zeros(height(df), dtype=bool)
    found[has] = (at >= 0) & (latest[np.maximum(at, 0)] > after[has])
    return take(df, ~found) if found.any() else df


# ---------------------------------------------------------------------------- heads


def time_vec(expr: Expr, df: Cols, env: Mapping[str, Col]) -> Vec:
    """An explicit head time: an integer, or a float with an integral value; else none."""
    vec = value(expr, df, env)
    if vec.typ == "float":
        whole = np.floor(vec.values) == vec.values
        safe = np.where(whole, vec.values, 0.0)
        return Vec(safe.astype(np.int64), vec.valid() & whole, "int")
    if vec.typ == "int":
        return vec
    n = height(df)
    return Vec(np.zeros(n, np.int64), np.zeros(n, dtype=bool), "int")


def head_rows(
    head: Head,
    df: Cols,
    env: Mapping[str, Col],
    tau: np.ndarray,
    exp: np.ndarray,
    aggregates: Mapping[str, np.ndarray] | None = None,
) -> Cols:
    """The derived versions; rows with an undefined argument or time are dropped."""
    out: Cols = {}
    ok = np.ones(height(df), dtype=bool)
    for arg, name, typ in head.args:
        vec = cast(value(arg, df, env), typ)
        out[name] = vec.values
        ok &= present(vec)
    out.update(aggregates or {})
    if head.time is None:
        t = tau
    else:
        vec = time_vec(head.time, df, env)
        t = vec.values
        ok &= vec.valid()
    out["t"] = t
    out["kt"], out["exp"] = head_times(tau, t, exp, head.lifetime, NUMPY_OPS)
    out["_tau"] = tau
    if head.provenance:
        out[PROV] = df["__prov"]
    return out if ok.all() else take(out, ok)


@dataclass(frozen=True)
class Columns:
    """Each kind of step (`plan/steps.py`) over numpy columns, for the one walk of
    `engine/interpreter.py`. ``limit``: the most matches a join may make (`TooLarge` past
    it); ``reach``: how long an aggregate's matches can live (`rules.Aggregate.reach_from`).
    Guards and checks narrow a mask (``Matches.keep``) that the next step needing whole
    rows takes at once, so that many columns are cut once."""

    limit: int
    reach: int = NEVER

    def read(self, step: Read, source: Cols) -> Matches:
        df, env, _, keys = _atom_frame(step.scan, source, step.keyed)
        return Matches(df, env, step.scan.index + 1, keys)

    def _joined(self, left: Matches, right: Matches, df: Cols) -> Matches:
        env = {**right.env, **left.env}
        return Matches(df, env, max(left.atoms, right.atoms), left.keys + right.keys)

    def join_on(self, left: Matches, right: Matches, on: Sequence[str]) -> Matches:
        df = join_on(left.df, right.df, [f"v_{v}" for v in on], self.limit)
        return self._joined(left, right, df)

    def band_join(self, left: Matches, right: Matches, band: Band, index: int) -> Matches:
        df = _band_join(left.df, left.env, right.df, right.env, band, self.limit)
        return self._joined(left, right, df)

    def cross(self, left: Matches, right: Matches) -> Matches:
        return self._joined(left, right, join_on(left.df, right.df, [], self.limit))

    def unit(self) -> Matches:
        return Matches({"__unit": np.zeros(1, dtype=np.int64)}, {}, 0, [])

    def summarise(
        self, m: Matches, step: Summarise, sources: Sequence[Cols], window: tuple[int, int]
    ) -> Matches:
        df = summarise(step, _settled(m), sources, window, self.limit)
        env = {**m.env, **{agg.var: Col(f"v_{agg.var}", agg.type) for agg in step.aggregates}}
        return Matches(df, env, step.scans + 1, m.keys)

    def let(self, m: Matches, step: Let) -> Matches:
        d = step.definition
        df = dict(m.df)  # a column added: not to a source's
        n = height(df)
        vec = value(d.expr, df, m.env)
        typ = vec.typ or d.type
        df[f"v_{d.var}"] = vec.values if vec.typ else np.zeros(n, NUMPY[typ])
        ok = None
        if vec.ok is not None or vec.typ is None:
            ok = f"v_{d.var}__ok"
            df[ok] = vec.valid() if vec.typ else np.zeros(n, dtype=bool)
        return replace(m, df=df, env={**m.env, d.var: Col(f"v_{d.var}", typ, ok)})

    def check(self, m: Matches, step: Check) -> Matches:
        checked = (step.expr, f"__x{step.scan}_{step.position}", step.type)
        return _narrowed(m, _checked([checked], m.df, m.env))

    def filter(self, m: Matches, step: Filter) -> Matches:
        return _narrowed(m, truthy(value(step.guard, m.df, m.env)))

    def valid(self, m: Matches, window: Within, a: int, b: int) -> Matches:
        tau, mexp = _tau(m.df, m.atoms), _min_exp(m.df, m.atoms)
        keep = mexp > tau
        if m.keep is not None:
            keep &= m.keep
        if window is Within.MADE:
            keep &= (tau >= a) & (tau < b)
        elif window is Within.SLIDING:  # what expired at ``a`` changes a window then
            keep &= (tau < b) & (mexp >= a)
        df = dict(m.df) if keep.all() else take(m.df, keep)
        df["__tau"], df["__mexp"] = tau[keep], mexp[keep]
        return replace(m, df=df, keep=None)

    def anti_join(
        self, m: Matches, step: AntiJoin, source: Cols, during: tuple[int, int] | None
    ) -> Matches:
        df = anti_join(_settled(m), step.negation, source, m.env, during)
        return replace(m, df=df, keep=None)

    def choose(self, m: Matches, step: Choose, before: Cols) -> tuple[Matches, Cols]:
        df, made = chosen(_settled(m), step.choice, m.env, before)
        return replace(m, df=df, keep=None), made

    def provenance(self, m: Matches, step: Provenance) -> Matches:
        df = _settled(m)
        parts = [df[f"__prov{i}"] for i in step.scans]
        return replace(m, df={**df, "__prov": provenance.united(parts, height(df))}, keep=None)

    def make(self, m: Matches, step: Make, stamp: tuple[int, int] | None) -> Cols:
        df = _settled(m)
        if stamp is None:
            tau, exp = df["__tau"], df["__mexp"]
        else:
            n = height(df)
            tau, exp = np.full(n, stamp[0], np.int64), np.full(n, stamp[1], np.int64)
        return head_rows(step.head, df, m.env, tau, exp)

    def aggregate(self, m: Matches, rule: RulePlan, a: int, b: int) -> Cols:
        return grouped(rule, m, a, b, self.reach)


def _settled(m: Matches) -> Cols:
    """The rows of ``m`` its guards and checks keep."""
    return m.df if m.keep is None or m.keep.all() else take(m.df, m.keep)


def _narrowed(m: Matches, keep: np.ndarray) -> Matches:
    return replace(m, keep=keep if m.keep is None else m.keep & keep)


def derive(
    rule: RulePlan,
    sources: Sequence[Cols],
    negated: Sequence[Cols],
    a: int,
    b: int,
    limit: int,
) -> Cols:
    """New versions made by ``rule`` from matches with ``tau`` in ``[a, b)``; `TooLarge`
    when a join would make more than ``limit`` matches."""
    return interpreter.derive(rule, Columns(limit), sources, negated, a, b).rows


def derive_choosing(
    rule: RulePlan,
    sources: Sequence[Cols],
    negated: Sequence[Cols],
    a: int,
    b: int,
    limit: int,
    before: Sequence[Cols] = (),
) -> tuple[Cols, list[Cols]]:
    """As `derive`, the rule's ``choose``s reading what earlier epochs chose (``before``,
    see `chosen`); with the rows of their tables for the keys chosen for the first time."""
    made = interpreter.derive(rule, Columns(limit), sources, negated, a, b, before)
    return made.rows, made.chosen


def derive_next(
    rule: RulePlan, sources: Sequence[Cols], negated: Sequence[Cols], previous: Epoch, limit: int
) -> Cols:
    """As :func:`dagster_pomo.engine.spark.rule_frames.derive_next`: what an ``@next`` rule
    derives from the versions of the epoch ``previous`` (its negated atoms with no version
    known by its end and alive after its start), stamped at its end and alive one epoch
    more; an ``@async`` rule's matches with ``tau`` in ``previous``, stamped at its end."""
    return interpreter.derive_next(rule, Columns(limit), sources, negated, previous)


def aggregate(
    rule: RulePlan,
    sources: Sequence[Cols],
    negated: Sequence[Cols],
    a: int,
    b: int,
    reach: int,
    limit: int,
) -> Cols:
    """An aggregate rule's versions over ``[a, b)`` (see `grouped`)."""
    return interpreter.derive(rule, Columns(limit, reach), sources, negated, a, b).rows


def _sorted(df: Cols, by: Sequence[str]) -> np.ndarray:
    """The rows in order of ``by``'s values, first column first, ties kept in their order."""
    order = np.arange(height(df))
    for c in reversed(by):
        order = order[np.argsort(df[c][order], kind="stable")]
    return order


def chosen(df: Cols, choice: Choice, env: Mapping[str, Col], earlier: Cols) -> tuple[Cols, Cols]:
    """As :func:`dagster_pomo.engine.spark.rule_frames.chosen`: per ``choose`` keys, the
    matches with the values an earlier epoch chose (``earlier``), else with those of the
    first match (the least values at the earliest ``tau``); and the rows of its table for
    the keys chosen for the first time."""
    side = choice.table
    for v in choice.values:
        if env[v].ok is not None:
            df = take(df, np.asarray(df[env[v].ok], dtype=bool))
    keys = [env[k].column for k in choice.keys]
    picked = [env[v].column for v in choice.values]
    n = len(keys)
    # Keys an earlier epoch chose for: the matches with its values.
    known = np.zeros(height(df), dtype=bool)
    if height(earlier) and height(df) and not keys:
        known[:] = True  # one choice of all: made already
    elif height(earlier) and height(df):
        mine, _ = pairs_on([df[c] for c in keys], [earlier[c] for c in side.columns[:n]])
        known[mine] = True
    was = {c: earlier[s] for c, s in zip([*keys, *picked], side.columns, strict=True)}
    kept = join_on(take(df, known), was, [*keys, *picked], None)
    # The others: the first match's values, per key.
    fresh = take(df, ~known)
    first = _distinct(take(fresh, _sorted(fresh, ["__tau", *picked])), keys)
    columns = list(dict.fromkeys([*keys, *picked]))
    kept_new = join_on(fresh, _select(first, columns), columns, None)
    df = concat([kept, kept_new]) if height(kept) else kept_new
    table = {s: first[c] for c, s in zip([*keys, *picked], side.columns, strict=True)}
    tau = first["__tau"]
    made = {**table, "t": tau, "kt": tau, "exp": np.full(len(tau), NEVER), "_tau": tau}
    return df, made


def grouped(rule: RulePlan, m: Matches, a: int, b: int, reach: int) -> Cols:
    """Per group and per distinct ``tau`` in ``[a, b)`` (and, without an explicit ``@time``,
    each time in ``[a, b)`` a match expires): the group's matches made by then and alive
    then, each distinct combination of events once (as
    :func:`dagster_pomo.engine.spark.rule_frames.grouped`). ``m``: the valid matches alive
    in ``[a, b)`` or expired at ``a``, with their provenance."""
    assert rule.aggregate is not None
    # A combination's versions cut each other short (below); one version each (which
    # `at_one_time` implies) needs no keys (`steps.Read.keyed`).
    head = rule.head
    single = rule.aggregate.one_version_each and not head.provenance
    df = _settled(m)
    functions = rule.aggregate.functions
    made: Cols = {}
    ok = np.ones(height(df), dtype=bool)
    group: list[str] = []
    for j, (arg, _, typ) in enumerate(head.args):
        vec = cast(value(arg, df, m.env), typ)
        made[f"__g{j}"], ok = vec.values, ok & present(vec)
        group.append(f"__g{j}")
    if head.time is not None:
        vec = time_vec(head.time, df, m.env)
        made["__gt"], ok = vec.values, ok & vec.valid()
        group.append("__gt")
    aggregates: list[tuple[str, str | None]] = []
    for i, (fn, arg, _, _) in enumerate(functions):
        if arg is not None:
            vec = value(arg, df, m.env)
            made[f"__val{i}"], ok = vec.values, ok & present(vec)
            aggregates.append((fn, f"__val{i}"))
        else:
            aggregates.append((fn, None))
    made.update({"__at": df["__tau"], "__mexp": df["__mexp"], **{k: df[k] for k in m.keys}})
    if head.provenance:
        made["__prov"] = df["__prov"]
        aggregates.append(("union", "__prov"))
    made = take(made, ok)
    # The least or greatest text: swept as its rank among the texts (code point order, as
    # Spark and the reference compare text), read back as the text of that rank.
    texts: dict[int, np.ndarray] = {}
    for i, (fn, column) in enumerate(aggregates):
        if column is not None and fn in ("min", "max") and made[column].dtype == object:
            texts[i], ranks = np.unique(made[column], return_inverse=True)
            made[column] = ranks.astype(np.int64)
    # The sweep groups by one number a group: its text is converted and numbered once here.
    made["__grp"] = row_codes([made[c] for c in group], height(made))
    if single:  # one version-match a combination, alive until its exp
        until = made["__mexp"]
    else:
        # A combination of events may match in several versions: at time x it counts once,
        # with the latest expiry among its versions made by x. Its time line is cut into
        # segments, from each version's tau to the next one's (see the Spark plan).
        combination = ["__grp", *m.keys]  # never empty: every atom's event is a key
        codes = row_codes([made[c] for c in combination], height(made))
        order = np.lexsort((made["__at"], codes))
        made, codes = take(made, order), codes[order]
        last = np.append(codes[1:] != codes[:-1], True)  # of its combination
        mexp = running_max(made["__mexp"], codes)
        if head.provenance:  # a segment rests on its combination's versions made by then
            made["__prov"] = provenance.running(codes, made["__prov"])
        after = np.append(made["__at"][1:], NEVER)
        after[last] = NEVER
        made["__mexp"] = mexp
        until = np.minimum(after.astype(np.int64), mexp)
    made["__until"] = until
    at = made["__at"]
    made = take(made, (until > at) & (until >= a))
    at, until = made["__at"], made["__until"]
    made["__full"] = until >= NEVER if reach >= NEVER else until == at + reach
    columns = ["__grp", "__at", "__until", "__mexp", "__full", *(c for _, c in aggregates if c)]
    table = pa.table({c: pa.array(made[c], from_pandas=True) for c in columns})
    sliding = b if rule.window else None  # a window's value changes at expiries too
    folds = {i: _fold_of(fn, rule.aggregate.lattice) for i, (fn, _) in enumerate(aggregates)}
    swept = sliding_aggregates.sweep(
        table,
        ["__grp"],
        aggregates,
        None if reach >= NEVER else reach,
        NEVER,
        a,
        sliding,
        {i: f for i, f in folds.items() if f is not None},
    )
    n = swept.column("__n").to_numpy()
    aggs: dict[str, np.ndarray] = {}
    for i, (fn, _, column, typ) in enumerate(functions):
        part = swept.column(f"__part{i}").to_numpy(zero_copy_only=False)
        if folds[i] is not None:
            aggs[column] = part
            continue
        if i in texts:
            aggs[column] = texts[i][part.astype(np.int64)]
            continue
        result = part / n if fn == "average" else part
        aggs[column] = cast(Vec(result, None, _typ(result)), typ).values
    # Each group's values from one of its rows.
    codes = made["__grp"]
    row_of = np.zeros(int(codes.max()) + 1 if len(codes) else 0, dtype=np.int64)
    row_of[codes] = np.arange(len(codes))
    rows = row_of[swept.column("__grp").to_numpy()]
    grouped = {c: made[c][rows] for c in group}
    grouped["__at"] = swept.column("__at").to_numpy()
    if head.provenance:
        grouped["__prov"] = swept.column(f"__part{len(functions)}").to_numpy(zero_copy_only=False)
    head_env = {f"__head{j}": Col(f"__g{j}", typ) for j, (_, _, typ) in enumerate(head.args)}
    if head.time is not None:
        head_env["__headt"] = Col("__gt", "int")
    tau = grouped["__at"]
    exp = swept.column("__least_exp").to_numpy(zero_copy_only=False)
    return head_rows(grouped_head_of(head), grouped, head_env, tau, exp, aggs)


def _fold_of(function: str, lattice: str | None) -> Callable[[list[Value]], Value] | None:
    """What a head aggregate does with the values alive at a time when it is no reduction
    numpy does: a `collect`'s set (its distinct values in the one order of values), a
    lattice's merge; None for the others."""
    if function == "collect":
        return lambda values: tuple(sorted(set(values), key=value_order))
    if function == "union":  # of provenance lists
        return provenance.union
    if function == "lattice" and lattice is not None:
        merge = lattices.merge_of(lattice)
        return lambda values: lattices.fold(merge, values)
    return None


def _typ(values: np.ndarray) -> str:
    return "float" if values.dtype.kind == "f" else "int"


def dedupe(schema: Schema, df: Cols) -> Cols:
    """One version per ``(args, t, kt)``: the longest-living, or an aggregate's latest."""
    columns = row_columns(schema)
    if not height(df):
        return _select(df, columns)
    if schema.aggregates:
        df = take(df, np.argsort(df["_tau"], kind="stable"))
    key = [df[c] for c in [*schema.columns, "t", "kt"]]
    if schema.aggregates:
        rows = distinct(key, height(df), "last")
        out = take(_select(df, columns), rows)
    else:
        merged = longest(key, df["exp"], df["_tau"])
        if merged is None:
            return _select(df, columns)
        rows, exp, tau = merged
        out = {**take(_select(df, columns), rows), "exp": exp, "_tau": tau}
    if schema.provenance and len(rows) < height(df):  # a key's versions rest on all theirs
        codes = row_codes(key, height(df))
        order, starts = groups(codes)
        unions = provenance.united_by(order, starts, df[PROV])
        of_key = dict(zip(codes[order[starts]].tolist(), unions, strict=True))
        out[PROV] = provenance.lists(of_key[c] for c in codes[rows].tolist())
    return out
