"""A non-recursive stratum of one small epoch, worked out in this process.

A small epoch's Spark jobs, plans and their analysis cost far more than its rows: a
water-tank epoch of 10,000 readings waits about a second and a half for seven jobs.
Here the same rules run over pandas frames of the same versions (read from the
warehouse's Parquet files, see ``SparkEvaluator``), with the plans' semantics
(:mod:`dagster_pomo.engine.inprocess.rules`), and the versions come back as Arrow
tables for the warehouse.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from dagster_pomo.engine.constants import tick_ranges
from dagster_pomo.engine.inprocess import rules as R
from dagster_pomo.engine.schema import Schema
from dagster_pomo.engine.timeline import NEVER
from dagster_pomo.lang import Program, Stratum


def supported(program: Program, stratum: Stratum, schemas: Mapping[str, Schema]) -> bool:
    """Whether ``stratum`` can be worked out here: no recursion, no ``@next`` in the corpus
    (its versions come from Spark plans) and every rule :func:`rules.rule_supported`."""
    if stratum.recursive or stratum.inductive:
        return False
    if any(r.is_inductive for r in program.corpus.rules):
        return False
    return all(R.rule_supported(r, schemas) for r in stratum.rules if r.body)


def ticks(program: Program, schema: Schema, clock_start: int, start: int, end: int) -> pd.DataFrame:
    """Clock ticks alive at some instant of ``[start, end)`` (none before the clock start)."""
    offset_col, period_col = schema.columns
    parts = []
    for o, p, first, stop in tick_ranges(program, clock_start, start, end):
        t = o + np.arange(first, stop, dtype=np.int64) * p
        parts.append(
            pd.DataFrame(
                {
                    offset_col: np.full(len(t), o, np.int64),
                    period_col: np.full(len(t), p, np.int64),
                    "t": t,
                    "kt": t,
                    "exp": t + p,
                    "_tau": t,
                }
            )
        )
    if not parts:
        return empty(schema)
    return pd.concat(parts, ignore_index=True)


def empty(schema: Schema) -> pd.DataFrame:
    return R.arrow_schema(schema).empty_table().to_pandas()


def evaluate(
    program: Program,
    stratum: Stratum,
    schemas: Mapping[str, Schema],
    state: Callable[[str], pd.DataFrame],
    seeds: Mapping[str, pd.DataFrame | None],
    life: Mapping[str, int],
    a: int,
    b: int,
) -> dict[str, pa.Table]:
    """The versions of each relation of ``stratum`` made for epoch ``[a, b)``: what its
    rules derive from ``state`` (a relation's versions that can take part) merged with
    ``seeds`` (facts and deferred events), one version per ``(args, t, kt)``."""
    catalog = program.catalog
    out: dict[str, pa.Table] = {}
    for name in stratum.relations:
        schema = schemas[name]
        own = [r for r in stratum.rules if r.body and r.head.relation == name]
        made = []
        for rule in own:
            positives = [state(atom.relation) for atom in rule.positive]
            negatives = [state(atom.relation) for atom in rule.negative]
            lifetime = catalog[name].lifetime
            if rule.aggregates:
                reach = min(life.get(atom.relation, NEVER) for atom in rule.positive)
                args = (rule, positives, negatives, schemas, lifetime, a, b, reach)
                made.append(R.aggregate(*args))
            else:
                made.append(R.derive(rule, positives, negatives, schemas, lifetime, a, b))
        parts = [p for p in (seeds.get(name), *made) if p is not None]
        if seeds.get(name) is None and len(own) == 1 and own[0].aggregates:
            rows = made[0][R.row_columns(schema)]  # one version per (group, tau) already
        elif parts:
            rows = R.dedupe(schema, pd.concat([p[R.row_columns(schema)] for p in parts]))
        else:
            rows = empty(schema)
        out[name] = pa.Table.from_pandas(rows, schema=R.arrow_schema(schema), preserve_index=False)
    return out
