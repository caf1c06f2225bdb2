"""One rule over pandas frames of versions, as :mod:`dagster_pomo.engine.spark.rules` plans it.

The same steps as the Spark plans, on the epoch's few rows in this process: positive
atoms become renamed columns and join on shared variables (or on buckets of a band
their guards keep them in), ``where`` adds columns, guards filter, ``tau`` is the
largest ``kt``, negations drop the matches some agreeing version is alive for, and the
head computes ``t``, ``kt`` and ``exp`` (DESIGN §3.1). Aggregates cut each combination
of events into segments and hand them to :mod:`dagster_pomo.engine.sliding_aggregates`, which the
Spark plans run in their tasks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from dagster_pomo.engine import sliding_aggregates
from dagster_pomo.engine.cid import cids
from dagster_pomo.engine.column_joins import (
    cross_pairs,
    distinct,
    equal_pairs,
    key_codes,
    longest,
    pairs_on,
    row_codes,
)
from dagster_pomo.engine.inprocess.exprs import (
    NUMPY,
    Col,
    Vec,
    binop,
    cast,
    present,
    supported,
    truthy,
    value,
)
from dagster_pomo.engine.task_rounds import NUMPY_OPS
from dagster_pomo.lang import ast
from dagster_pomo.lang.kinds import element_of, expr_type
from dagster_pomo.plan.band_joins import Band
from dagster_pomo.plan.rules import (
    BodyAggregate,
    Head,
    Negation,
    RulePlan,
    Scan,
    grouped_head_of,
)
from dagster_pomo.plan.scans import CID, comparable
from dagster_pomo.plan.schema import META, PROV, Schema, row_columns
from dagster_pomo.plan.time import head_times
from dagster_pomo.timeline import EARLIEST, NEVER, PAST

ARROW = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}


def arrow_type(typ: str) -> pa.DataType:
    """A column type (a set's as a list) in Arrow."""
    element = element_of(typ)
    return ARROW[typ] if element is None else pa.list_(ARROW[element])


def arrow_schema(schema: Schema) -> pa.Schema:
    """The stored columns of a relation as Arrow types (those of Spark's ``struct_of``)."""
    fields = [pa.field(c, ARROW[t]) for c, t in zip(schema.columns, schema.types, strict=True)]
    fields += [pa.field(f"_agg_{fn}", arrow_type(t)) for fn, _, t in schema.aggregates]
    fields += [pa.field(m, pa.int64()) for m in META]
    if schema.provenance:
        fields.append(pa.field(PROV, pa.list_(pa.string())))
    return pa.schema(fields)


def rule_supported(plan: RulePlan) -> bool:
    """Whether this module works a rule out as the Spark plans do: its expressions are
    :func:`exprs.supported`, its head's values fit their columns, its aggregates are over
    numbers (the others take Spark's range window)."""
    rule, types = plan.rule, plan.types
    exprs: list[ast.Expr] = [*rule.guards, *(d.expr for d in rule.defs)]
    for atom in (*rule.positive, *rule.negative):
        exprs += [a for a in atom.args if not isinstance(a, ast.Var | ast.Wildcard)]
        exprs += [x for ann in atom.annotations for x in ann.args]
    exprs += [*rule.head.args, *(x for ann in rule.head.annotations for x in ann.args)]
    for agg in plan.body_aggregates:
        local = {**types, **{v: t for v, _, t in agg.scan.binds}}
        exprs += [x for _, x, _, _ in agg.scan.checks]
        if agg.arg is not None:
            if not supported(agg.arg, local):
                return False
            if agg.function not in ("min", "max") and expr_type(agg.arg, local) == "str":
                return False
    if not all(supported(e, types) for e in exprs if not isinstance(e, ast.Wildcard)):
        return False
    for arg, _, typ in plan.head.args:
        found = expr_type(arg, types)
        if found not in (None, typ) and {found, typ} != {"int", "float"}:
            return False
    functions = plan.aggregate.functions if plan.aggregate else ()
    return all(
        fn not in ("collect", "lattice")
        and (arg is None or expr_type(arg, types) in ("int", "float"))
        for fn, arg, *_ in functions
    )


# ---------------------------------------------------------------------------- matches


@dataclass
class Matches:
    """A frame of matches: variable columns, and ``__kt<i>``/``__exp<i>`` per atom (and
    ``__k<i>_<j>``, the atom's event, when asked for); the rows the guards keep (``keep``,
    None: all), taken by `valid` with its own, so that a large frame is copied once."""

    df: pd.DataFrame
    env: dict[str, Col]
    atoms: int
    keys: list[str]
    keep: np.ndarray | None = None


def _atom_frame(
    scan: Scan, df: pd.DataFrame, want_key: bool
) -> tuple[pd.DataFrame, dict[str, Col], list[tuple[ast.Expr, str, str]], list[str]]:
    i = scan.index
    if scan.reads_cid:
        columns = [df[c].tolist() for c in scan.identity]
        ids = cids(scan.relation, columns, df["t"].tolist())
        df = df.assign(**{CID: pd.Series(ids, index=df.index, dtype=object)})
    env = {name: Col(col, typ) for name, col, typ in scan.binds}
    keep = np.ones(len(df), dtype=bool)
    for a, b in scan.same:
        keep &= df[a].to_numpy() == df[b].to_numpy()
    for const, col, typ in scan.constants:
        wanted = value(const, df, {})
        if comparable(wanted.typ, typ):
            keep &= truthy(binop("==", Vec(df[col].to_numpy(), None, typ), wanted))
        else:
            keep[:] = False
    checks = [(arg, f"__x{i}_{j}", typ) for j, arg, _, typ in scan.checks]
    renamed = {f"__x{i}_{j}": df[col] for j, _, col, _ in scan.checks}
    out = {f"v_{name}": df[c.column] for name, c in env.items()}
    out.update(renamed)
    out[f"__kt{i}"] = df["kt"]
    out[f"__exp{i}"] = df["exp"]
    keys: list[str] = []
    if want_key:
        for c in scan.key:
            keys.append(f"__k{i}_{c}")
            out[keys[-1]] = df[c]
    frame = pd.DataFrame(out)[keep] if not keep.all() else pd.DataFrame(out)
    return (
        frame.reset_index(drop=True),
        {name: Col(f"v_{name}", c.typ) for name, c in env.items()},
        checks,
        keys,
    )


def matches(
    rule: RulePlan,
    sources: Sequence[pd.DataFrame],
    limit: int,
    want_keys: bool = False,
    window: tuple[int, int] = (EARLIEST, NEVER),
) -> Matches:
    """As :func:`dagster_pomo.engine.spark.rules.matches`: ``sources`` one per scan, then one
    per body aggregate."""
    joined: pd.DataFrame | None = None
    env: dict[str, Col] = {}
    checks: list[tuple[ast.Expr, str, str]] = []
    keys: list[str] = []
    for scan, df in zip(rule.scans, sources, strict=False):
        frame, frame_env, frame_checks, frame_keys = _atom_frame(scan, df, want_keys)
        checks += frame_checks
        keys += frame_keys
        join = scan.join
        if joined is None:
            joined = frame
        elif join.kind == "on":
            joined = join_on(joined, frame, [f"v_{v}" for v in join.on], limit)
        else:
            joined = _band_join(joined, env, frame, frame_env, join.band, limit)
        for name, col in frame_env.items():
            env.setdefault(name, col)
    if rule.body_aggregates:
        if joined is None:  # no positive atom: one match, alive always
            joined = pd.DataFrame({"__unit": np.zeros(1, dtype=np.int64)})
        joined = summarise(rule, joined, sources[len(rule.scans) :], window, limit)
        env.update({agg.var: Col(f"v_{agg.var}", agg.type) for agg in rule.body_aggregates})
    assert joined is not None
    for d in rule.defs:
        vec = value(d.expr, joined, env)
        typ = vec.typ or d.type
        joined[f"v_{d.var}"] = vec.values if vec.typ else np.zeros(len(joined), NUMPY[typ])
        ok = None
        if vec.ok is not None or vec.typ is None:
            ok = f"v_{d.var}__ok"
            joined[ok] = vec.valid() if vec.typ else np.zeros(len(joined), dtype=bool)
        env[d.var] = Col(f"v_{d.var}", typ, ok)
    keep = np.ones(len(joined), dtype=bool)
    for expr, column, typ in checks:
        vec = value(expr, joined, env)
        if comparable(vec.typ, typ):
            keep &= truthy(binop("==", vec, Vec(joined[column].to_numpy(), None, typ)))
        else:
            keep[:] = False
    for guard in rule.guards:
        keep &= truthy(value(guard, joined, env))
    return Matches(joined, env, rule.atoms, keys, None if keep.all() else keep)


def summarise(
    rule: RulePlan,
    joined: pd.DataFrame,
    sources: Sequence[pd.DataFrame],
    window: tuple[int, int],
    limit: int,
) -> pd.DataFrame:
    """As :func:`dagster_pomo.engine.spark.rules.summarise`: the body aggregates as one more
    atom, a row per match and piece."""
    a, b = window
    n = len(rule.scans)
    if n:
        tau = np.column_stack([joined[f"__kt{k}"].to_numpy() for k in range(n)]).max(axis=1)
        mexp = np.column_stack([joined[f"__exp{k}"].to_numpy() for k in range(n)]).min(axis=1)
    else:
        tau, mexp = np.full(len(joined), PAST), np.full(len(joined), NEVER)
    groups = list(dict.fromkeys(f"v_{v}" for agg in rule.body_aggregates for v in agg.group))
    joined = joined.assign(__mtau=tau.astype(np.int64), __mmexp=mexp.astype(np.int64))
    key = [*groups, "__mtau", "__mmexp"]
    lives = (mexp > tau) & (tau < b) & (mexp > a)
    asked = _distinct(joined.loc[lives, key])
    at = asked["__mtau"].to_numpy()
    parts = [asked[(at >= a) & (at < b)].assign(__at=lambda f: f["__mtau"])]
    summarised = []
    for agg, source in zip(rule.body_aggregates, sources, strict=True):
        events, same = _summarised(agg, source, a, b)
        summarised.append((agg, events, same))
        own = list(same.values())
        changes = pd.concat(
            [
                events[[*own, "__ekt"]].rename(columns={"__ekt": "__at"}),
                events[[*own, "__eexp"]].rename(columns={"__eexp": "__at"}),
            ],
            ignore_index=True,
        )
        x = changes["__at"].to_numpy()
        changes = _distinct(changes[(x >= a) & (x < b)])
        later = _pair(asked, changes, same, limit)
        x = later["__at"].to_numpy()
        parts.append(later[(later["__mtau"].to_numpy() < x) & (x < later["__mmexp"].to_numpy())])
    times = pd.concat([p[[*key, "__at"]] for p in parts], ignore_index=True)
    pieces = _distinct(times)
    until = pieces["__mmexp"].to_numpy()
    how = {"count": "size", "sum": "sum", "min": "min", "max": "max", "average": "mean"}
    for agg, events, same in summarised:
        numbered = pieces[[*key, "__at"]].assign(__piece=np.arange(len(pieces)))
        covered = _pair(numbered, events, same, limit)
        x = covered["__at"].to_numpy()
        covered = covered[(covered["__ekt"].to_numpy() <= x) & (x < covered["__eexp"].to_numpy())]
        event = [covered[c].to_numpy() for c in covered.columns if c.startswith("__k")]
        # Per piece and event (an event's versions count once): its latest expiry and value.
        per_event = pd.DataFrame(
            {
                "__piece": covered["__piece"].to_numpy(),
                "__event": row_codes(event, len(covered)),
                "__e": covered["__eexp"].to_numpy(),
                "__val": covered["__val"].to_numpy(),
            }
        ).groupby(["__piece", "__event"], sort=False)
        by = per_event.agg(__e=("__e", "max"), __val=("__val", "max")).groupby(level=0)
        found, least_found = by["__val"].agg(how[agg.function]), by["__e"].min()
        at = found.index.to_numpy()
        has = np.zeros(len(pieces), dtype=bool)
        has[at] = True
        res = np.zeros(len(pieces), dtype=found.dtype)
        res[at] = found.to_numpy()
        least = np.full(len(pieces), NEVER, dtype=np.int64)
        least[at] = least_found.to_numpy()
        if agg.empty is None:  # a piece no event covers has no value
            pieces, res, least, until = pieces[has], res[has], least[has], until[has]
            pieces = pieces.reset_index(drop=True)
            has = has[has]
        until = np.minimum(until, least)
        result = np.where(has, res, agg.empty) if agg.empty is not None else res
        pieces[f"v_{agg.var}"] = result.astype(NUMPY[agg.type])
    i = rule.atoms - 1
    pieces = pieces.assign(**{f"__kt{i}": pieces["__at"], f"__exp{i}": until}).drop(columns="__at")
    out = join_on(joined, pieces, key, limit)
    return out.drop(columns=["__mtau", "__mmexp"])


def _distinct(df: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The first row of each key of ``df`` (its values of ``columns``, by default all), in
    order (`column_joins.distinct`: text compared whole)."""
    names = list(df.columns if columns is None else columns)
    keep = distinct([df[c].to_numpy() for c in names], len(df))
    return df[keep].reset_index(drop=True)


def _pair(
    left: pd.DataFrame, right: pd.DataFrame, same: Mapping[str, str], limit: int
) -> pd.DataFrame:
    """Every pair of a row of ``left`` and one of ``right`` in the same group (``same``: a
    left column and the right one equal to it)."""
    return join_on(left, right, list(same), limit, list(same.values()))


def join_on(
    left: pd.DataFrame,
    right: pd.DataFrame,
    on: Sequence[str],
    limit: int | None,
    right_on: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The rows of ``left`` and ``right`` whose columns ``on`` (``right_on`` in ``right``,
    by default the same names) are equal, side by side, in ``left``'s order; the right's
    key columns left out. With no column, every pair. `TooLarge` past ``limit`` rows."""
    theirs = list(on if right_on is None else right_on)
    if on:
        keys = [left[c].to_numpy() for c in on], [right[c].to_numpy() for c in theirs]
        mine, other = pairs_on(*keys, limit)
    else:
        mine, other = cross_pairs(len(left), len(right), limit)
    return paired(left, right.drop(columns=theirs), mine, other)


def _summarised(
    agg: BodyAggregate, source: pd.DataFrame, a: int, b: int
) -> tuple[pd.DataFrame, dict[str, str]]:
    """As :func:`dagster_pomo.engine.spark.rules._summarised`: the versions a body
    aggregate summarises that may matter to ``[a, b)``, with their groups renamed apart."""
    i = agg.scan.index
    frame, env, checks, keys = _atom_frame(agg.scan, source, want_key=True)
    keep = np.ones(len(frame), dtype=bool)
    for expr, column, typ in checks:
        vec = value(expr, frame, env)
        if comparable(vec.typ, typ):
            keep &= truthy(binop("==", vec, Vec(frame[column].to_numpy(), None, typ)))
        else:
            keep[:] = False
    if agg.arg is None:
        values = np.ones(len(frame), dtype=np.int64)
    else:
        vec = value(agg.arg, frame, env)
        values, keep = vec.values, keep & present(vec)
    renamed = {f"v_{g}": f"__e{i}_{j}" for j, g in enumerate(agg.group)}
    events = pd.DataFrame(
        {
            **{e: frame[g].to_numpy() for g, e in renamed.items()},
            "__val": values,
            "__ekt": frame[f"__kt{i}"].to_numpy(),
            "__eexp": frame[f"__exp{i}"].to_numpy(),
            **{k: frame[k].to_numpy() for k in keys},
        }
    )
    kt, exp = events["__ekt"].to_numpy(), events["__eexp"].to_numpy()
    events = events[keep & (kt < b) & (exp >= a)].reset_index(drop=True)
    return events, {g: e for g, e in renamed.items()}


def _band_join(
    left: pd.DataFrame,
    left_env: Mapping[str, Col],
    right: pd.DataFrame,
    right_env: Mapping[str, Col],
    band: Band | None,
    limit: int,
) -> pd.DataFrame:
    """Frames sharing no variable: paired within buckets of a band their guards keep two
    integer variables in (the guards still decide), else every pair."""
    if band is not None:
        x, y = left_env[band.left], right_env[band.right]
        width, first, last = band.buckets()
        offsets = np.arange(first, last + 1, dtype=np.int64)
        yb = right[y.column].to_numpy() // width
        rows = np.repeat(np.arange(len(right)), len(offsets))
        bands = np.repeat(yb, len(offsets)) + np.tile(offsets, len(right))
        mine, theirs = equal_pairs(left[x.column].to_numpy() // width, bands, limit)
        return paired(left, right, mine, rows[theirs])
    return join_on(left, right, [], limit)


def paired(
    left: pd.DataFrame, right: pd.DataFrame, mine: np.ndarray, theirs: np.ndarray
) -> pd.DataFrame:
    """Rows ``mine`` of ``left`` beside rows ``theirs`` of ``right`` (no column in both)."""
    columns = {c: left[c].to_numpy()[mine] for c in left.columns}
    columns.update({c: right[c].to_numpy()[theirs] for c in right.columns})
    return pd.DataFrame(columns)


def _tau(m: Matches) -> np.ndarray:
    kts = (m.df[f"__kt{i}"].to_numpy() for i in range(m.atoms))
    return functools.reduce(np.maximum, kts).astype(np.int64, copy=False)


def _min_exp(m: Matches) -> np.ndarray:
    exps = (m.df[f"__exp{i}"].to_numpy() for i in range(m.atoms))
    return functools.reduce(np.minimum, exps).astype(np.int64, copy=False)


Within = Callable[[np.ndarray, np.ndarray], np.ndarray]


def valid(
    m: Matches, rule: RulePlan, negated: Sequence[pd.DataFrame], within: Within | None = None
) -> pd.DataFrame:
    """Matches whose versions are all alive at ``__tau`` and whose negations hold there;
    and, given ``within``, for which it holds (of ``tau`` and the least expiry)."""
    tau, mexp = _tau(m), _min_exp(m)
    keep = mexp > tau
    if m.keep is not None:
        keep &= m.keep
    if within is not None:
        keep &= within(tau, mexp)
    df = m.df[keep].reset_index(drop=True)
    df["__tau"], df["__mexp"] = tau[keep], mexp[keep]
    for negation, source in zip(rule.negations, negated, strict=True):
        df = anti_join(df, negation, source, m.env)
    return df


def anti_join(
    df: pd.DataFrame, negation: Negation, source: pd.DataFrame, env: Mapping[str, Col]
) -> pd.DataFrame:
    """Drop the rows of ``df`` for which some version of ``atom`` agreeing with them is
    alive at ``__tau`` (made by then, expiring after): per agreeing group, the latest
    expiry among the versions made by ``tau`` is after it."""
    if df.empty or source.empty:
        return df
    left: dict[str, np.ndarray] = {}
    right: dict[str, np.ndarray] = {}
    has = np.ones(len(df), dtype=bool)
    for j, (arg, col, typ) in enumerate(negation.columns):
        if isinstance(arg, ast.Wildcard):
            continue
        vec = value(arg, df, env)
        if not comparable(vec.typ, typ):
            return df  # no version can agree
        stored = source[col].to_numpy()
        mine = vec.values
        if vec.typ != typ:  # an int and a float: compared as doubles
            stored, mine = stored.astype(np.float64), mine.astype(np.float64)
        has &= vec.valid()
        left[f"__n{j}"], right[f"__n{j}"] = mine, stored
    # The agreeing values as one number, on both sides (`key_codes`).
    if left:
        mine_by, theirs_by = key_codes(list(left.values()), list(right.values()))
    else:
        mine_by, theirs_by = np.zeros(len(df), np.int64), np.zeros(len(source), np.int64)
    tau = df["__tau"].to_numpy()
    probe = pd.DataFrame({"__by": mine_by, "__tau": tau, "__row": np.arange(len(df))})[has]
    kt, exp = source["kt"].to_numpy(), source["exp"].to_numpy()
    versions = pd.DataFrame({"__by": theirs_by, "kt": kt, "exp": exp})
    versions = versions.groupby(["__by", "kt"], sort=False, as_index=False)["exp"].max()
    versions = versions.sort_values("kt", kind="stable")
    versions["exp"] = versions.groupby("__by", sort=False)["exp"].cummax()
    found = pd.merge_asof(
        probe.sort_values("__tau", kind="stable"),
        versions,
        left_on="__tau",
        right_on="kt",
        by="__by",
        direction="backward",
    )
    alive = found["exp"].to_numpy(dtype=np.float64, na_value=-np.inf) > found["__tau"].to_numpy()
    drop = np.zeros(len(df), dtype=bool)
    drop[found["__row"].to_numpy()[alive]] = True
    return df[~drop].reset_index(drop=True)


# ---------------------------------------------------------------------------- heads


def time_vec(expr: ast.Expr, df: pd.DataFrame, env: Mapping[str, Col]) -> Vec:
    """An explicit head time: an integer, or a float with an integral value; else none."""
    vec = value(expr, df, env)
    if vec.typ == "float":
        whole = np.floor(vec.values) == vec.values
        safe = np.where(whole, vec.values, 0.0)
        return Vec(safe.astype(np.int64), vec.valid() & whole, "int")
    if vec.typ == "int":
        return vec
    return Vec(np.zeros(len(df), np.int64), np.zeros(len(df), dtype=bool), "int")


def head_rows(
    head: Head,
    df: pd.DataFrame,
    env: Mapping[str, Col],
    tau: np.ndarray,
    exp: np.ndarray,
    aggregates: Mapping[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """The derived versions; rows with an undefined argument or time are dropped."""
    out: dict[str, np.ndarray] = {}
    ok = np.ones(len(df), dtype=bool)
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
    frame = pd.DataFrame(out)
    return frame if ok.all() else frame[ok].reset_index(drop=True)


def derive(
    rule: RulePlan,
    sources: Sequence[pd.DataFrame],
    negated: Sequence[pd.DataFrame],
    a: int,
    b: int,
    limit: int,
) -> pd.DataFrame:
    """New versions made by ``rule`` from matches with ``tau`` in ``[a, b)``; `TooLarge`
    when a join would make more than ``limit`` matches."""
    m = matches(rule, sources, limit, window=(a, b))
    df = valid(m, rule, negated, lambda tau, _: (tau >= a) & (tau < b))
    df = chosen(df, rule, m.env)
    tau, mexp = df["__tau"].to_numpy(), df["__mexp"].to_numpy()
    return head_rows(rule.head, df, m.env, tau, mexp)


def chosen(df: pd.DataFrame, rule: RulePlan, env: Mapping[str, Col]) -> pd.DataFrame:
    """As :func:`dagster_pomo.engine.spark.rules.chosen`: per ``choose`` keys and ``tau``,
    the matches with the least values."""
    for keys, values in rule.choices:
        if df.empty:
            return df
        picked = [env[v].column for v in values]
        for v in values:
            if env[v].ok is not None:
                df = df[df[env[v].ok].to_numpy()]
        by = [env[k].column for k in keys] + ["__tau"]
        first = _distinct(df.sort_values(picked, kind="stable"), by)[[*by, *picked]]
        df = join_on(df, first, [*by, *picked], None)
    return df.reset_index(drop=True)


def aggregate(
    rule: RulePlan,
    sources: Sequence[pd.DataFrame],
    negated: Sequence[pd.DataFrame],
    a: int,
    b: int,
    reach: int,
    limit: int,
) -> pd.DataFrame:
    """Per group and per distinct ``tau`` in ``[a, b)``: the group's matches made by ``tau``
    and alive at ``tau``, each distinct combination of events once (as
    :func:`dagster_pomo.engine.spark.rules.aggregate`)."""
    assert rule.aggregate is not None
    # A combination's versions cut each other short (below); one version each (which
    # `at_one_time` implies) needs no keys.
    single = rule.aggregate.one_version_each
    m = matches(rule, sources, limit, want_keys=not single)
    df = valid(m, rule, negated, lambda tau, mexp: (tau < b) & (mexp > a))
    head = rule.head
    functions = rule.aggregate.functions
    cols: dict[str, np.ndarray] = {}
    ok = np.ones(len(df), dtype=bool)
    group: list[str] = []
    for j, (arg, _, typ) in enumerate(head.args):
        vec = cast(value(arg, df, m.env), typ)
        cols[f"__g{j}"], ok = vec.values, ok & present(vec)
        group.append(f"__g{j}")
    if head.time is not None:
        vec = time_vec(head.time, df, m.env)
        cols["__gt"], ok = vec.values, ok & vec.valid()
        group.append("__gt")
    aggregates: list[tuple[str, str | None]] = []
    for i, (fn, arg, _, _) in enumerate(functions):
        if arg is not None:
            vec = value(arg, df, m.env)
            cols[f"__val{i}"], ok = vec.values, ok & present(vec)
            aggregates.append((fn, f"__val{i}"))
        else:
            aggregates.append((fn, None))
    made = pd.DataFrame(
        {
            **cols,
            "__at": df["__tau"].to_numpy(),
            "__mexp": df["__mexp"].to_numpy(),
            **{k: df[k].to_numpy() for k in m.keys},
        }
    )
    made = made[ok]
    if single:  # one version-match a combination, alive until its exp
        until = made["__mexp"].to_numpy()
    else:
        # A combination of events may match in several versions: at time x it counts once,
        # with the latest expiry among its versions made by x. Its time line is cut into
        # segments, from each version's tau to the next one's (see the Spark plan).
        combination = [*group, *m.keys]  # never empty: every atom's event is a key
        codes = row_codes([made[c].to_numpy() for c in combination], len(made))
        made = made.assign(__combination=codes)
        made = made.sort_values(["__combination", "__at"], kind="stable").reset_index(drop=True)
        same = made.groupby("__combination", sort=False)
        made["__mexp"] = same["__mexp"].cummax()
        after = same["__at"].shift(-1, fill_value=NEVER)
        until = np.minimum(after.to_numpy(dtype=np.int64), made["__mexp"].to_numpy())
    made = made.assign(__until=until)
    at = made["__at"].to_numpy()
    made = made[(until > at) & (until > a)]
    at, until = made["__at"].to_numpy(), made["__until"].to_numpy()
    made = made.assign(__full=until >= NEVER if reach >= NEVER else until == at + reach)
    columns = [*group, "__at", "__until", "__mexp", "__full", *(c for _, c in aggregates if c)]
    table = pa.Table.from_pandas(made[columns], preserve_index=False)
    swept = sliding_aggregates.sweep(
        table, group, aggregates, None if reach >= NEVER else reach, NEVER, a
    )
    n = swept.column("__n").to_numpy()
    aggs: dict[str, np.ndarray] = {}
    for i, (fn, _, column, typ) in enumerate(functions):
        part = swept.column(f"__part{i}").to_numpy(zero_copy_only=False)
        result = part / n if fn == "average" else part
        aggs[column] = cast(Vec(result, None, _typ(result)), typ).values
    grouped = swept.select([*group, "__at"]).to_pandas()
    head_env = {f"__head{j}": Col(f"__g{j}", typ) for j, (_, _, typ) in enumerate(head.args)}
    if head.time is not None:
        head_env["__headt"] = Col("__gt", "int")
    tau = grouped["__at"].to_numpy()
    exp = swept.column("__least_exp").to_numpy(zero_copy_only=False)
    return head_rows(grouped_head_of(head), grouped, head_env, tau, exp, aggs)


def _typ(values: np.ndarray) -> str:
    return "float" if values.dtype.kind == "f" else "int"


def dedupe(schema: Schema, df: pd.DataFrame) -> pd.DataFrame:
    """One version per ``(args, t, kt)``: the longest-living, or an aggregate's latest."""
    columns = row_columns(schema)
    if df.empty:
        return df[columns]
    if schema.aggregates:
        df = df.sort_values("_tau", kind="stable")
    key = [df[c].to_numpy() for c in [*schema.columns, "t", "kt"]]
    if schema.aggregates:
        return df[columns][distinct(key, len(df), "last")].reset_index(drop=True)
    merged = longest(key, df["exp"].to_numpy(), df["_tau"].to_numpy())
    if merged is None:
        return df[columns].reset_index(drop=True)
    rows, exp, tau = merged
    return df[columns].iloc[rows].reset_index(drop=True).assign(exp=exp, _tau=tau)
