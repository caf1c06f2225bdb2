"""One rule as a Spark DataFrame plan, for one epoch ``[a, b)``.

Every relation arrives as a DataFrame of versions with its columns plus ``t``,
``kt``, ``exp``, ``_tau`` and one ``_agg_<fn>`` column per aggregate. A
positive atom becomes a filtered, renamed projection; atoms join on shared
variables; ``where`` adds columns; guards and expression arguments filter;
``tau`` is the largest ``kt``; negations are anti-joins on versions alive at
``tau``. The head computes ``t``, ``kt`` and ``exp`` as docs/semantics.md, Events and times says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce

import pandas as pd
from pyspark import cloudpickle
from pyspark.sql import Column, DataFrame, SparkSession, Window, WindowSpec
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from dagster_pomo.engine import cid as content_ids
from dagster_pomo.engine import interpreter, lattices
from dagster_pomo.engine.local import column_joins, sliding_aggregates
from dagster_pomo.engine.spark.exprs import SPARK_TYPES, compile_typed, spark_type, truthy
from dagster_pomo.lang.interpret import Value
from dagster_pomo.plan.band_joins import Band
from dagster_pomo.plan.exprs import Expr, equals
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
from dagster_pomo.plan.schema import PROV, row_columns
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
from dagster_pomo.plan.time import Ops, head_times
from dagster_pomo.timeline import NEVER, PAST, Epoch

# Executors get the sweep's code with each task, so they need numpy and pyarrow, not us.
cloudpickle.register_pickle_by_value(sliding_aggregates)
cloudpickle.register_pickle_by_value(column_joins)
cloudpickle.register_pickle_by_value(content_ids)


def _var(name: str) -> str:
    return f"v_{name}"


@dataclass
class Matches:
    """A DataFrame of matches: variable columns, and ``__kt<i>``/``__exp<i>``/``__key<i>``."""

    df: DataFrame
    env: dict[str, tuple[str, str]]  # variable -> (column, type)
    atoms: int


SPARK_OPS = Ops(
    greatest=F.greatest,
    least=F.least,
    where=lambda c, a, b: F.when(c, a).otherwise(b),
    constant=lambda v, _: F.lit(v).cast("long"),
)


def cid_column(relation: str, columns: Sequence[str]) -> Column:
    """Each row's content ID (``engine/cid.py``), worked out in Spark's Python workers by
    the function every engine uses."""

    @F.pandas_udf("string")  # type: ignore[call-overload]
    def digest(rows: pd.DataFrame) -> pd.Series:
        *args, times = [rows[c].tolist() for c in rows.columns]  # the arguments, then `t`
        return pd.Series(content_ids.cids(relation, args, times))

    identity = [F.col(c).alias(f"a{i}") for i, c in enumerate(columns)]
    return digest(F.struct(*identity, F.col("t").alias("t")))


def _atom_frame(
    scan: Scan, df: DataFrame, want_key: bool
) -> tuple[DataFrame, dict[str, tuple[str, str]], list]:
    """Select and rename one positive atom's columns; return deferred expression checks."""
    i = scan.index
    if scan.reads_cid:
        df = df.withColumn(CID, cid_column(scan.relation, scan.identity))
    filters = [F.col(a) == F.col(b) for a, b in scan.same]
    for const, col, typ in scan.constants:
        filters.append(matched(const, col, typ, {}))
    checks = [(arg, f"__x{i}_{j}", typ) for j, arg, _, typ in scan.checks]
    cols = [F.col(col).alias(f"__x{i}_{j}") for j, _, col, _ in scan.checks]
    for f in filters:
        df = df.filter(f)
    selected = [F.col(col).alias(_var(name)) for name, col, _ in scan.binds]
    selected += cols
    selected += [F.col("kt").alias(f"__kt{i}"), F.col("exp").alias(f"__exp{i}")]
    if scan.provenance == "stored":
        selected.append(F.col(PROV).alias(f"__prov{i}"))
    elif scan.provenance == "own":
        own = F.col(CID) if scan.reads_cid else cid_column(scan.relation, scan.identity)
        selected.append(F.array(own).alias(f"__prov{i}"))
    if want_key:
        selected.append(F.struct(*[F.col(c) for c in scan.key]).alias(f"__key{i}"))
    out = df.select(*selected)
    return out, {name: (_var(name), typ) for name, _, typ in scan.binds}, checks


def _and(conditions: Sequence[Column]) -> Column:
    return reduce(lambda x, y: x & y, conditions, F.lit(True))


def summarise(
    step: Summarise, joined: DataFrame, sources: Sequence[DataFrame], window: tuple[int, int]
) -> DataFrame:
    """``joined`` (matches of the scans) with the body aggregates as one more atom: a row
    per match and piece (see `BodyAggregate`), the piece's start and end as the atom's
    ``kt`` and ``exp``, for the pieces that start in ``window``.

    What is summarised depends only on a match's groups and life, so those are asked about
    once each; the times to answer are the match's ``tau`` and its groups' arrivals and
    expiries in between; each time meets each group's versions alive then, counted once
    per event, with its latest expiry."""
    a, b = window
    n = step.scans
    kts = [F.col(f"__kt{k}") for k in range(n)]
    exps = [F.col(f"__exp{k}") for k in range(n)]
    tau = F.greatest(*kts) if n > 1 else kts[0] if kts else F.lit(PAST)
    mexp = F.least(*exps) if n > 1 else exps[0] if exps else F.lit(NEVER)
    groups = list(dict.fromkeys(_var(v) for agg in step.aggregates for v in agg.group))
    joined = joined.withColumns({"__mtau": tau.cast("long"), "__mmexp": mexp.cast("long")})
    lives = (F.col("__mmexp") > F.col("__mtau")) & (F.col("__mtau") < b) & (F.col("__mmexp") > a)
    asked = joined.filter(lives).select(*groups, "__mtau", "__mmexp").distinct()
    key = [*groups, "__mtau", "__mmexp"]
    first = asked.filter((F.col("__mtau") >= a) & (F.col("__mtau") < b))
    times = first.withColumn("__at", F.col("__mtau"))
    summarised = []
    for agg, source in zip(step.aggregates, sources, strict=True):
        events, same_group = _summarised(agg, source, a, b)
        summarised.append((agg, events, same_group))
        own = list(same_group.values())
        changes = events.select(*own, F.col("__ekt").alias("__at")).unionByName(
            events.select(*own, F.col("__eexp").alias("__at"))
        )
        changes = changes.filter((F.col("__at") >= a) & (F.col("__at") < b)).distinct()
        inside = (F.col("__mtau") < F.col("__at")) & (F.col("__at") < F.col("__mmexp"))
        on = [F.col(g) == F.col(e) for g, e in same_group.items()]
        later = asked.join(changes, on=_and([*on, inside])).select(*key, "__at")
        times = times.unionByName(later)
    times = times.distinct()
    pieces = times
    untils = []
    for j, (agg, events, same_group) in enumerate(summarised):
        alive = (F.col("__ekt") <= F.col("__at")) & (F.col("__at") < F.col("__eexp"))
        on = [F.col(g) == F.col(e) for g, e in same_group.items()]
        covered = times.join(events, on=_and([*on, alive]), how="left")
        per_event = covered.groupBy(*key, "__at", "__ekey").agg(
            F.max("__eexp").alias("__e"), F.max("__val").alias("__val")
        )
        summary = {
            "count": F.count("__e"),
            "sum": F.sum("__val"),
            "min": F.min("__val"),
            "max": F.max("__val"),
            "average": F.avg("__val"),
        }[agg.function]
        result = summary if agg.empty is None else F.coalesce(summary, F.lit(agg.empty))
        values = per_event.groupBy(*key, "__at").agg(
            result.cast(SPARK_TYPES[agg.type]).alias(_var(agg.var)),
            F.min("__e").alias(f"__least{j}"),
        )
        pieces = pieces.join(values.dropna(subset=[_var(agg.var)]), on=[*key, "__at"])
        untils.append(F.coalesce(F.col(f"__least{j}"), F.col("__mmexp")))
    i = n  # the atom after the scans
    pieces = pieces.select(
        *key,
        *[_var(agg.var) for agg in step.aggregates],
        F.col("__at").alias(f"__kt{i}"),
        F.least(F.col("__mmexp"), *untils).alias(f"__exp{i}"),
    )
    out = joined.join(pieces, on=key, how="inner")
    return out.drop("__mtau", "__mmexp")


def _summarised(
    agg: BodyAggregate, source: DataFrame, a: int, b: int
) -> tuple[DataFrame, dict[str, str]]:
    """The versions a body aggregate summarises that may matter to ``[a, b)`` (made before
    ``b``, expiring at ``a`` or later): their groups (renamed apart from the matches'
    columns; returned as match column -> own column), value, ``kt``, ``exp`` and event."""
    i = agg.scan.index
    frame, env, checks = _atom_frame(agg.scan, source, want_key=True)
    for expr, column, typ in checks:
        frame = frame.filter(matched(expr, column, typ, env))
    value = F.lit(1) if agg.arg is None else compile_typed(agg.arg, env)[0]
    renamed = {_var(g): f"__e{i}_{j}" for j, g in enumerate(agg.group)}
    events = frame.select(
        *[F.col(g).alias(e) for g, e in renamed.items()],
        value.alias("__val"),
        F.col(f"__kt{i}").alias("__ekt"),
        F.col(f"__exp{i}").alias("__eexp"),
        F.col(f"__key{i}").alias("__ekey"),
    )
    made = F.col("__val").isNotNull() & (F.col("__ekt") < b) & (F.col("__eexp") >= a)
    return events.filter(made), renamed


def _band_join(
    i: int,
    left: DataFrame,
    left_env: Mapping[str, tuple[str, str]],
    right: DataFrame,
    right_env: Mapping[str, tuple[str, str]],
    band: Band,
) -> DataFrame:
    """Join two frames that share no variable on buckets of the band's width (the guards
    still filter): its ``left`` variable is the left frame's, its ``right`` the right's."""
    x, y = left_env[band.left], right_env[band.right]
    width, first, last = band.buckets()
    on = f"__band{i}"
    right = right.withColumn(
        on,
        F.explode(F.sequence(_bucket(y[0], width) + first, _bucket(y[0], width) + last)),
    )
    joined = left.withColumn(on, _bucket(x[0], width)).join(right, on=on, how="inner")
    return joined.drop(on)


def _bucket(column: str, width: int) -> Column:
    """``floor(column / width)`` in exact integer arithmetic."""
    return F.expr(f"(`{column}` - pmod(`{column}`, {width})) div {width}")


def _tau(m: Matches) -> Column:
    kts = [F.col(f"__kt{i}") for i in range(m.atoms)]
    return kts[0] if len(kts) == 1 else F.greatest(*kts)


def _min_exp(m: Matches) -> Column:
    exps = [F.col(f"__exp{i}") for i in range(m.atoms)]
    return exps[0] if len(exps) == 1 else F.least(*exps)


def anti_join(
    df: DataFrame,
    negation: Negation,
    source: DataFrame,
    env: Mapping[str, tuple[str, str]],
    *alive: Column,
) -> DataFrame:
    """Drop the rows of ``df`` for which some version of the negated atom agreeing with them
    is alive (``alive`` conditions over ``__n_kt``/``__n_exp``)."""
    pairs = negation.columns
    k = negation.index
    right = source.select(
        *[F.col(col).alias(f"__n{k}_{j}") for j, (_, col, _) in enumerate(pairs)],
        F.col("kt").alias("__n_kt"),
        F.col("exp").alias("__n_exp"),
    )
    condition: Column = F.lit(True)
    for j, (arg, _, typ) in enumerate(pairs):
        if arg is not None:
            condition = condition & matched(arg, f"__n{k}_{j}", typ, env)
    for cond in alive:
        condition = condition & cond
    return df.join(right, on=condition, how="left_anti")


def time_column(expr: Expr, env: Mapping[str, tuple[str, str]]) -> Column:
    """An explicit head time: an integer, or a float with an integral value; else undefined."""
    value, vtype = compile_typed(expr, env)
    if vtype == "float":
        return F.when(value == F.floor(value), value.cast("long"))
    return value.cast("long") if vtype == "int" else F.lit(None).cast("long")


def head_rows(
    head: Head,
    df: DataFrame,
    env: Mapping[str, tuple[str, str]],
    tau: Column,
    exp: Column,
    aggregates: Sequence[Column] = (),
    text: tuple[Sequence[str], int, str] = ((), 0, ""),
) -> DataFrame:
    """The derived versions: head arguments, ``t``, ``kt`` and ``exp`` (and, for a carrier,
    the provenance the rows hold as ``__prov``); rows with an undefined value are dropped.
    ``text``: columns whose values must be at most so many characters long, and the error
    a task raises with otherwise (see `TEXT_BUDGET`)."""
    checked, most, said = text
    cols = []
    for arg, name, typ in head.args:
        value, _ = compile_typed(arg, env)
        value = value.cast(SPARK_TYPES[typ])
        if name in checked:
            value = F.when(F.length(value) > most, F.raise_error(F.lit(said))).otherwise(value)
        cols.append(value.alias(name))
    t = tau if head.time is None else time_column(head.time, env)
    kt, expires = head_times(tau, t, exp, head.lifetime, SPARK_OPS)
    out = df.select(
        *cols,
        *aggregates,
        t.alias("t"),
        kt.alias("kt"),
        expires.alias("exp"),
        tau.alias("_tau"),
        *([F.col("__prov").alias(PROV)] if head.provenance else []),
    )
    names = [name for _, name, _ in head.args] + ["t"]
    return out.dropna(subset=names)


TEXT_BUDGET = "pomo: text budget exceeded by the rule at offset "  # and the rule's offset


def matched(expr: Expr, column: str, typ: str, env: Mapping[str, tuple[str, str]]) -> Column:
    """Where ``expr`` equals the frame's ``column`` of type ``typ`` (`exprs.equals`: never,
    for values that cannot be compared)."""
    guard = equals(expr, ExprVar(column, typ))
    return truthy(compile_typed(guard, {**env, column: (column, typ)})[0])


@dataclass(frozen=True)
class Frames:
    """Each kind of step (`plan/steps.py`) as DataFrame operations, for the one walk of
    `engine/interpreter.py`. ``combinations``: the most combinations a product of atoms may
    make (counted first, two small jobs; 0: not counted); ``text``: the longest text a rule
    may compute (its tasks fail with `TEXT_BUDGET` past it; 0: unchecked); ``buckets``: an
    aggregate's buckets of time."""

    session: SparkSession | None = None  # the sources' (a rule of body aggregates alone)
    combinations: int = 0
    text: int = 0
    buckets: Buckets | None = None

    def read(self, step: Read, source: DataFrame) -> Matches:
        frame, env, _ = _atom_frame(step.scan, source, step.keyed)
        return Matches(frame, env, step.scan.index + 1)

    def _joined(self, left: Matches, right: Matches, df: DataFrame) -> Matches:
        env = {**right.env, **left.env}
        return Matches(df, env, max(left.atoms, right.atoms))

    def join_on(self, left: Matches, right: Matches, on: Sequence[str]) -> Matches:
        df = left.df.join(right.df, on=[_var(v) for v in on], how="inner")
        return self._joined(left, right, df)

    def band_join(self, left: Matches, right: Matches, band: Band, index: int) -> Matches:
        df = _band_join(index, left.df, left.env, right.df, right.env, band)
        return self._joined(left, right, df)

    def cross(self, left: Matches, right: Matches) -> Matches:
        if self.combinations > 0:
            n = left.df.count() * right.df.count()
            if n > self.combinations:
                raise column_joins.TooLarge(f"a product of {n:,} combinations", n)
        return self._joined(left, right, left.df.crossJoin(right.df))

    def unit(self) -> Matches:
        spark = self.session or SparkSession.active()
        return Matches(spark.range(1).select(F.lit(0).alias("__unit")), {}, 0)

    def summarise(
        self,
        m: Matches,
        step: Summarise,
        sources: Sequence[DataFrame],
        window: tuple[int, int],
    ) -> Matches:
        df = summarise(step, m.df, sources, window)
        env = {**m.env, **{agg.var: (_var(agg.var), agg.type) for agg in step.aggregates}}
        return Matches(df, env, step.scans + 1)

    def let(self, m: Matches, step: Let) -> Matches:
        d = step.definition
        col, typ = compile_typed(d.expr, m.env)
        return Matches(
            m.df.withColumn(_var(d.var), col),
            {**m.env, d.var: (_var(d.var), typ or d.type)},
            m.atoms,
        )

    def check(self, m: Matches, step: Check) -> Matches:
        keep = matched(step.expr, f"__x{step.scan}_{step.position}", step.type, m.env)
        return Matches(m.df.filter(keep), m.env, m.atoms)

    def filter(self, m: Matches, step: Filter) -> Matches:
        return Matches(m.df.filter(truthy(compile_typed(step.guard, m.env)[0])), m.env, m.atoms)

    def valid(self, m: Matches, window: Within, a: int, b: int) -> Matches:
        df = m.df.withColumns({"__tau": _tau(m), "__mexp": _min_exp(m)})
        tau, mexp = F.col("__tau"), F.col("__mexp")
        keep = mexp > tau
        if window is Within.MADE:
            keep = keep & (tau >= a) & (tau < b)
        elif window is Within.SLIDING:  # what expired at ``a`` changes a window then
            keep = keep & (tau < b) & (mexp >= a)
        return Matches(df.filter(keep), m.env, m.atoms)

    def anti_join(
        self, m: Matches, step: AntiJoin, source: DataFrame, during: tuple[int, int] | None
    ) -> Matches:
        n_kt, n_exp = F.col("__n_kt"), F.col("__n_exp")
        if during is None:
            alive = (n_kt <= F.col("__tau"), n_exp > F.col("__tau"))
        else:
            alive = (n_kt < during[1], n_exp > during[0])
        return Matches(anti_join(m.df, step.negation, source, m.env, *alive), m.env, m.atoms)

    def choose(self, m: Matches, step: Choose, before: DataFrame) -> tuple[Matches, DataFrame]:
        df, made = chosen(m.df, step.choice, m.env, before)
        return Matches(df, m.env, m.atoms), made

    def provenance(self, m: Matches, step: Provenance) -> Matches:
        parts = [F.col(f"__prov{i}") for i in step.scans]
        prov = _unite(*parts) if parts else F.array().cast("array<string>")
        return Matches(m.df.withColumn("__prov", prov), m.env, m.atoms)

    def make(self, m: Matches, step: Make, stamp: tuple[int, int] | None) -> DataFrame:
        if stamp is None:
            tau, exp = F.col("__tau"), F.col("__mexp")
        else:
            tau, exp = (F.lit(x).cast("long") for x in stamp)
        text = (step.text if self.text else (), self.text, f"{TEXT_BUDGET}{step.offset}")
        return head_rows(step.head, m.df, m.env, tau, exp, text=text)

    def aggregate(self, m: Matches, rule: RulePlan, a: int, b: int) -> DataFrame:
        assert self.buckets is not None
        return grouped(rule, m, a, b, self.buckets)


def _frames(sources: Sequence[DataFrame], **budgets: object) -> Frames:
    session = sources[0].sparkSession if sources else None
    return Frames(session, **budgets)  # type: ignore[arg-type]


def derive(
    rule: RulePlan,
    sources: Sequence[DataFrame],
    negated: Sequence[DataFrame],
    a: int,
    b: int,
    budgets: tuple[int, int] = (0, 0),
    chosen_before: Sequence[DataFrame] = (),
) -> DataFrame:
    """New versions made by ``rule`` from matches with ``tau`` in ``[a, b)``. ``budgets``:
    the most combinations a product of atoms may make and the longest text the rule may
    compute (see `Frames`). ``chosen_before``: per ``choose``, what earlier epochs chose
    (see `chosen`)."""
    combinations, most = budgets
    frames = _frames([*sources, *negated], combinations=combinations, text=most)
    return interpreter.derive(rule, frames, sources, negated, a, b, chosen_before).rows


def first_choices(
    rule: RulePlan,
    sources: Sequence[DataFrame],
    negated: Sequence[DataFrame],
    a: int,
    b: int,
    chosen_before: Sequence[DataFrame],
) -> list[DataFrame]:
    """Per ``choose`` of ``rule``, what matches with ``tau`` in ``[a, b)`` choose for keys
    no earlier epoch chose for (see `chosen`): rows of its table."""
    if not rule.choices:
        return []
    frames = _frames([*sources, *negated, *chosen_before])
    return interpreter.derive(rule, frames, sources, negated, a, b, chosen_before).chosen


def chosen(
    df: DataFrame,
    choice: Choice,
    env: Mapping[str, tuple[str, str]],
    earlier: DataFrame,
) -> tuple[DataFrame, DataFrame]:
    """The matches ``choose((keys), (values))`` keeps, a functional dependency across time:
    per keys, those with the values an earlier epoch chose (``earlier``, its table,
    `rules.Choice`), else with the values of the first match (the least values among the
    matches at the earliest ``tau``); and the rows of its table for the keys chosen for the
    first time."""
    keys = [F.col(env[k][0]) for k in choice.keys]
    picked = [F.col(env[v][0]) for v in choice.values]
    df = df.filter(_and([c.isNotNull() for c in picked]))
    n = len(keys)
    old = earlier.select(
        *[F.col(c).alias(f"__ck{i}") for i, c in enumerate(choice.table.columns[:n])],
        F.struct(*[F.col(c).alias(f"x{j}") for j, c in enumerate(choice.table.columns[n:])]).alias(
            "__was"
        ),
    )
    on = _and([k.eqNullSafe(F.col(f"__ck{i}")) for i, k in enumerate(keys)])
    mine = F.struct(*[c.alias(f"x{j}") for j, c in enumerate(picked)])
    first = F.min(F.struct(F.col("__tau").alias("t"), mine.alias("x"))).over(
        Window.partitionBy(*keys)
    )
    df = df.join(F.broadcast(old), on=on, how="left").withColumn("__first", first)
    new = F.col("__was").isNull()
    firsts = F.col("__first.x") == mine
    table = df.filter(new & firsts & (F.col("__tau") == F.col("__first.t")))
    side = choice.table
    table = table.select(
        *[
            c.cast(SPARK_TYPES[typ]).alias(name)
            for c, name, typ in zip([*keys, *picked], side.columns, side.types, strict=True)
        ],
        F.col("__tau").alias("t"),
        F.col("__tau").alias("kt"),
        F.lit(NEVER).cast("long").alias("exp"),
        F.col("__tau").alias("_tau"),
    )
    keep = F.when(new, firsts).otherwise(F.col("__was") == mine)
    drop = [f"__ck{i}" for i in range(n)]
    return df.filter(keep).drop(*drop, "__was", "__first"), table.dropDuplicates()


def derive_next(
    rule: RulePlan, sources: Sequence[DataFrame], negated: Sequence[DataFrame], previous: Epoch
) -> DataFrame:
    """What an ``@next`` rule derives from the versions of the epoch ``previous`` (known
    before its end): matches whose negated atoms have no version known by its end and alive
    after its start, stamped at its end and alive one epoch more (`time.next_stamp`). An
    ``@async`` rule: its matches with ``tau`` in ``previous`` (valid as a deductive rule's),
    stamped at its end, living their lifetime."""
    return interpreter.derive_next(rule, _frames([*sources, *negated]), sources, negated, previous)


def aggregate(
    rule: RulePlan,
    sources: Sequence[DataFrame],
    negated: Sequence[DataFrame],
    a: int,
    b: int,
    buckets: Buckets,
) -> DataFrame:
    """An aggregate rule's versions over ``[a, b)`` (see `grouped`)."""
    frames = _frames([*sources, *negated], buckets=buckets)
    return interpreter.derive(rule, frames, sources, negated, a, b).rows


@dataclass(frozen=True)
class Buckets:
    """Time buckets that turn "which matches are alive at ``tau``" into an equi-join.

    A match alive on ``[tau, mexp)`` is copied into every bucket it overlaps, a query
    time into the one bucket holding it; pairs are then only formed within a bucket.
    ``reach`` bounds ``mexp - tau`` (the shortest lifetime among the rule's atoms): with
    buckets that wide a match spans at most two. Without a bound the epoch is cut into
    ``PER_EPOCH`` buckets. Times before ``origin`` share one bucket. Any width gives the
    same result (the bucket of a time never decreases as the time grows); it only changes
    how many pairs are formed.
    """

    origin: int
    width: int
    reach: int = NEVER

    PER_EPOCH = 32

    @classmethod
    def for_epoch(cls, start: int, end: int, reach: int) -> Buckets:
        width = reach if reach < NEVER else (end - start) // cls.PER_EPOCH
        return cls(start, max(width, 1), reach)

    def of(self, time: Column) -> Column:
        shifted = F.greatest(time, F.lit(self.origin - self.width)) - F.lit(self.origin)
        return F.floor(shifted / F.lit(self.width))

    def spanned(self, start: Column, last: Column) -> Column:
        """One row per bucket that ``[start, last]`` overlaps (an array to explode)."""
        return F.sequence(self.of(start), self.of(last))

    def lives_fully(self, start: Column, until: Column) -> Column:
        """Whether a segment ``[start, until)`` lasts as long as any can: then it is alive at
        ``x`` exactly when ``start`` is in ``(x - reach, x]``, a range window over ``start``."""
        if self.reach >= NEVER:
            return until >= F.lit(NEVER)
        return until == start + F.lit(self.reach)

    def window(self, group: Sequence[str], time: str) -> WindowSpec:
        """The rows of ``group`` whose ``time`` is in ``(x - reach, x]``, for each row's ``x``."""
        ordered = Window.partitionBy(*group).orderBy(time)
        low = Window.unboundedPreceding if self.reach >= NEVER else -(self.reach - 1)
        return ordered.rangeBetween(low, Window.currentRow)


def _partials(
    rule: RulePlan, values: Sequence[str]
) -> list[tuple[str, Column, Callable[[Column, Column], Column]]]:
    """What each aggregate keeps of the matches alive at a time, as a window function over
    full-length segments, and how it takes in the short segments paired with that time: a
    count or a sum adds theirs (an average is a sum over the shared count ``__n``), a least
    or greatest value, and the least expiry, takes the least or greatest again. A part
    over no segment is null."""

    def adds(total: Column, column: Column) -> Column:
        return F.coalesce(total, F.lit(0)) + F.coalesce(F.sum(column), F.lit(0))

    parts: list[tuple[str, Column, Callable[[Column, Column], Column]]] = [
        ("__n", F.count("__mexp"), lambda w, s: F.coalesce(w, F.lit(0)) + F.count(s)),
        ("__least_exp", F.min("__mexp"), lambda w, s: F.least(w, F.min(s))),
    ]
    if rule.head.provenance:  # the union of the provenance of the matches alive then
        parts.append(
            ("__prov", F.collect_list("__prov"), lambda w, s: _unite(F.flatten(w), _sources(s)))
        )
    assert rule.aggregate is not None
    for i, (fn, _, _, _) in enumerate(rule.aggregate.functions):
        col = F.col(values[i])
        parts.append(
            {
                "count": (f"__part{i}", F.count("__mexp"), parts[0][2]),
                "sum": (f"__part{i}", F.sum(col), adds),
                "average": (f"__part{i}", F.sum(col.cast("double")), adds),
                "min": (f"__part{i}", F.min(col), lambda w, s: F.least(w, F.min(s))),
                "max": (f"__part{i}", F.max(col), lambda w, s: F.greatest(w, F.max(s))),
                "collect": (
                    f"__part{i}",
                    F.collect_set(col),
                    lambda w, s: F.array_union(w, F.collect_set(s)),
                ),
                # A lattice's values, merged once gathered (`_merged_by`).
                "lattice": (
                    f"__part{i}",
                    F.collect_list(col),
                    lambda w, s: F.concat(w, F.collect_list(s)),
                ),
            }[fn]
        )
    return parts


def _sources(column: Column) -> Column:
    """The union of the provenance lists in ``column`` (an aggregate or a window)."""
    return F.flatten(F.collect_list(column))


def united(column: str, over: WindowSpec | None = None) -> Column:
    """The union of a column of provenance lists over a group's rows (or a window's),
    sorted."""
    if over is None:
        return _unite(_sources(F.col(column)))
    return _unite(F.flatten(F.collect_list(column).over(over)))


def _unite(*lists: Column) -> Column:
    """Provenance lists as one: sorted, each content ID once, none for null."""
    joined = F.concat(*[F.coalesce(x, F.array().cast("array<string>")) for x in lists])
    return F.array_sort(F.array_distinct(joined))


def _merged_by(name: str, typ: str) -> Callable[[Column], Column]:
    """A column of lists of values, each merged by the lattice registered as ``name`` (in
    Spark's Python workers, which get the function with the plan)."""
    merge = lattices.merge_of(name)

    def merged(values: list[Value]) -> Value | None:
        return lattices.fold(merge, values)

    # Pickled, whatever the session's Arrow setting: Arrow would coerce the values its own
    # way (and PySpark would warn that it cannot read the kind of UDF from the hints).
    return F.udf(merged, spark_type(typ), useArrow=False)


def _by_window(
    rule: RulePlan,
    made: DataFrame,
    group: list[str],
    values: list[str],
    a: int,
    b: int,
    buckets: Buckets,
) -> DataFrame:
    """The aggregates' parts at each time asked about, in Spark alone, for any values.

    Full-length segments by a range window over the group's segments, each time answered
    on one of its rows (the short ones only mark the times to answer); short segments meet
    the times of the buckets they overlap, and of those the ones they cover."""
    parts = _partials(rule, values)
    carried = ["__mexp", *values, *(["__prov"] if rule.head.provenance else [])]
    rows = made.filter(F.col("__full") | (F.col("__at") >= a)).select(
        *group,
        "__at",
        *[F.when(F.col("__full"), F.col(c)).alias(c) for c in carried],
    )
    if rule.window:  # the times a segment ends are asked about too
        ends = made.filter((F.col("__until") >= a) & (F.col("__until") < b))
        nothing = [F.lit(None).cast(rows.schema[c].dataType).alias(c) for c in carried]
        rows = rows.unionByName(ends.select(*group, F.col("__until").alias("__at"), *nothing))
    frame = buckets.window(group, "__at")
    order = Window.partitionBy(*group).orderBy("__at")
    swept = rows.select(
        *group,
        "__at",
        *[one.over(frame).alias(name) for name, one, _ in parts],
        F.coalesce(F.lag("__at").over(order) != F.col("__at"), F.lit(True)).alias("__first"),
    )
    swept = swept.filter(F.col("__first") & (F.col("__at") >= a)).drop("__first")
    short = made.filter(~F.col("__full")).select(
        *group,
        F.col("__at").alias("__s_tau"),
        F.col("__until").alias("__s_until"),
        *[F.col(c).alias(f"__s{c}") for c in carried],
    )
    first = F.greatest(F.col("__s_tau"), F.lit(a))
    last = F.least(F.col("__s_until"), F.lit(b)) - 1
    spans = short.withColumn("__bucket", F.explode(buckets.spanned(first, last)))
    asked = swept.withColumn("__bucket", buckets.of(F.col("__at")))
    on = [asked[c] == spans[c] for c in [*group, "__bucket"]]
    on += [spans["__s_tau"] <= asked["__at"], asked["__at"] < spans["__s_until"]]
    joined = asked.join(spans, on=on, how="left").select(
        *[asked[c] for c in [*group, "__at"]],
        *[asked[name] for name, _, _ in parts],
        *[spans[f"__s{c}"] for c in carried],
    )
    short_of = {"__n": "__s__mexp", "__least_exp": "__s__mexp", "__prov": "__s__prov"}
    short_of.update({f"__part{i}": f"__s{v}" for i, v in enumerate(values)})
    grouped = joined.groupBy(*group, "__at").agg(
        *[take(F.max(name), F.col(short_of[name])).alias(name) for name, _, take in parts]
    )
    return grouped.filter(F.col("__n") > 0)  # a time where every segment has ended: none


def _by_sweep(
    rule: RulePlan,
    made: DataFrame,
    group: list[str],
    values: list[str],
    a: int,
    b: int,
    buckets: Buckets,
) -> DataFrame:
    """The same parts, for numeric values, in one pass: a partition's segments, sorted by
    group, go to :func:`sliding_aggregates.sweep` a batch of many groups at a time."""
    rows = made.select(*group, "__at", "__until", "__mexp", "__full", *values)
    typed = {f.name: f.dataType for f in rows.schema.fields}
    fields = [StructField(g, typed[g]) for g in group]
    fields += [StructField(c, LongType()) for c in ("__at", "__n", "__least_exp")]
    aggregates: list[tuple[str, str | None]] = []
    assert rule.aggregate is not None
    for i, (fn, arg, _, _) in enumerate(rule.aggregate.functions):
        column = values[i] if arg is not None else None
        aggregates.append((fn, column))
        kind = LongType() if column is None or fn == "sum" else typed[column]
        if fn == "average" or (fn == "sum" and typed[column] == DoubleType()):
            kind = DoubleType()
        fields.append(StructField(f"__part{i}", kind))
    reach = None if buckets.reach >= NEVER else buckets.reach
    sliding = b if rule.window else None  # a window's value changes at expiries too
    run = sliding_aggregates.streamed(group, aggregates, reach, NEVER, a, sliding)
    # Already so when the rows come from the window over the group's versions: no sort.
    rows = rows.sortWithinPartitions(*group) if group else rows.repartition(1)
    return rows.mapInArrow(run, StructType(fields))


def grouped(rule: RulePlan, m: Matches, a: int, b: int, buckets: Buckets) -> DataFrame:
    """Per group and per distinct ``tau`` in ``[a, b)`` (and, without an explicit ``@time``,
    each time in ``[a, b)`` a match expires): the group's matches made by then and still
    alive then, each distinct combination of events once. ``m``: the valid matches alive
    in ``[a, b)`` or expired at ``a`` (a match that expired at ``a`` changes a sliding
    window then), with their provenance.

    Matches that live as long as ``buckets.reach`` allows (every reading of a relation
    with a lifetime, say) are alive at ``x`` exactly when made in ``(x - reach, x]``, a slice
    of the group's matches sorted by time; the others, cut short, are paired with the times
    they cover. Numbers go through :mod:`sweep` one group at a time as Arrow tables; other
    values through a range window and a join on time buckets."""
    df = m.df
    head = rule.head
    assert rule.aggregate is not None
    functions = rule.aggregate.functions
    # The group's and the aggregates' columns in one step: Spark analyses the plan again at
    # every step, whatever the size of the data.
    added: dict[str, Column] = {}
    for j, (arg, _, typ) in enumerate(head.args):
        value, _ = compile_typed(arg, m.env)
        added[f"__g{j}"] = value.cast(SPARK_TYPES[typ])
    if head.time is not None:
        added["__gt"] = time_column(head.time, m.env)
    group = list(added)
    for i, (_, arg, _, _) in enumerate(functions):
        added[f"__val{i}"] = compile_typed(arg, m.env)[0] if arg is not None else F.lit(1)
    values = [c for c in added if c not in group]
    df = df.withColumns(added).dropna(subset=group + values)
    # Everything below works on a group's rows together: one shuffle by the group serves.
    # Sorted by the group first (what the per-group pass after it wants too), then by the
    # key's hash, so the sort seldom compares the nested key itself. One version a
    # combination needs no key (`steps.Read.keyed`).
    single = rule.aggregate.one_version_each and not head.provenance
    keyed = []
    if not single:
        key = F.struct(*[F.col(f"__key{i}") for i in range(m.atoms)])
        keyed = [key.alias("__key"), F.xxhash64(key).alias("__hash")]
    prov = ["__prov"] if head.provenance else []
    made = df.select(*group, "__tau", "__mexp", *values, *prov, *keyed)
    if rule.aggregate.at_one_time and not head.provenance:
        parts = _at_one_time(rule, made, group, values, a)
        return _aggregated(rule, parts, group)
    made = made.repartition(*group) if group else made
    if single:
        # One version a combination: its one segment, from its tau to its expiry.
        made = made.withColumn("__until", F.col("__mexp"))
    else:
        made = _segments(made, group, head.provenance)
    made = made.filter((F.col("__until") > F.col("__tau")) & (F.col("__until") >= a))
    full = buckets.lives_fully(F.col("__tau"), F.col("__until"))
    made = made.withColumn("__full", full)
    numeric = all(
        isinstance(made.schema[values[i]].dataType, (LongType, DoubleType))
        for i, (_, arg, _, _) in enumerate(functions)
        if arg is not None
    )
    sets = any(fn in ("collect", "lattice") for fn, *_ in functions)
    by = _by_sweep if numeric and not head.provenance and not sets else _by_window
    parts = by(rule, made.withColumnRenamed("__tau", "__at"), group, values, a, b, buckets)
    return _aggregated(rule, parts, group)


def _segments(made: DataFrame, group: list[str], provenance: bool) -> DataFrame:
    """A combination of events may match in several versions. At time x it counts once, with
    the latest expiry among its versions made by x and alive at x: its time line is cut
    into segments (``__until``), from each version's tau to the next one's, alive while
    that running latest expiry lasts. A time falls in at most one segment of a
    combination, and every time asked about (a distinct tau) in at least one. With
    ``provenance``, a segment rests on all the combination's versions made by then."""
    versions = Window.partitionBy(*group, "__hash", "__key").orderBy("__tau")
    running = versions.rowsBetween(Window.unboundedPreceding, 0)
    made = made.withColumn("__mexp", F.max("__mexp").over(running))
    until = F.least(F.coalesce(F.lead("__tau").over(versions), F.lit(NEVER)), F.col("__mexp"))
    made = made.withColumn("__until", until)
    return made.withColumn("__prov", united("__prov", running)) if provenance else made


def _at_one_time(
    rule: RulePlan, made: DataFrame, group: list[str], values: list[str], a: int
) -> DataFrame:
    """The aggregates' parts where each group's matches are all made at one time
    (`Aggregate.at_one_time`): one grouping, no running window. The relations it reads
    hold one version an event (made at its time), so a combination of events is one
    match, alive then (`valid`)."""
    alive = made.filter(F.col("__tau") >= a)
    parts = _partials(rule, values)
    return alive.groupBy(*group, F.col("__tau").alias("__at")).agg(
        *[one.alias(name) for name, one, _ in parts]
    )


def _aggregated(rule: RulePlan, grouped: DataFrame, group: list[str]) -> DataFrame:
    """The head's versions from the aggregates' parts at each time (``__at``)."""
    head = rule.head
    assert rule.aggregate is not None
    functions = rule.aggregate.functions
    aggs = []
    for i, (fn, _, column, typ) in enumerate(functions):
        part = F.col(f"__part{i}")
        result = part / F.col("__n") if fn == "average" else part
        if fn == "collect":  # a set: its distinct values in the one order of values
            result = F.array_sort(part)
        elif fn == "lattice":
            assert rule.aggregate.lattice is not None
            result = _merged_by(rule.aggregate.lattice, typ)(part)
        aggs.append(result.cast(spark_type(typ)).alias(column))
    prov = ["__prov"] if head.provenance else []  # united by `_by_window` already
    grouped = grouped.select(*group, "__at", *aggs, F.col("__least_exp").alias("__mexp"), *prov)
    # The head over the grouped columns: argument j is column __g<j>, the time __gt.
    head_env = {f"__head{j}": (f"__g{j}", typ) for j, (_, _, typ) in enumerate(head.args)}
    if head.time is not None:
        head_env["__headt"] = ("__gt", "int")
    grouped_head = grouped_head_of(head)
    agg_cols = [F.col(column) for _, _, column, _ in functions]
    return head_rows(grouped_head, grouped, head_env, F.col("__at"), F.col("__mexp"), agg_cols)


__all__ = [
    "Buckets",
    "aggregate",
    "anti_join",
    "derive",
    "derive_next",
    "head_rows",
    "united",
    "row_columns",
]
