"""The rounds of a recursion that is not linear, inside one Spark task.

A Spark round costs a job, its stages and a plan built again, whatever the size of its
delta: a counter that adds one row a round pays that a thousand times. When the relation
fits one task (`Policy.task_rows` versions), the rounds after the first run there instead,
with this process's rules (`stratum.rounds_from`) over the relation's rows, its earlier
epochs' and the lower relations' (shipped with the task): a round costs what its rows
cost. The task hands back what it knows, the versions still waiting to be joined flagged,
when the relation outgrows it or a round would pass a limit: Spark's rounds go on from
there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa

from dagster_pomo.engine.budgets import Budgets
from dagster_pomo.engine.local import stratum as local
from dagster_pomo.engine.local.arrow_schemas import arrow_schema
from dagster_pomo.engine.local.column_joins import concat, from_arrow, height, take, to_arrow
from dagster_pomo.engine.local.linear_fixpoint import NEW, ROUNDS, as_stored
from dagster_pomo.plan.corpus import StratumPlan
from dagster_pomo.plan.schema import Schema

KIND = "__kind"  # what an input row is: one of the three below
KNOWN, WAITING, EARLIER = 0, 1, 2  # a version so far, one the next round joins, an earlier epoch's


def task(
    stratum: StratumPlan,
    schemas: Mapping[str, Schema],
    lower: Mapping[str, pa.Table],
    out: pa.Schema,
    window: tuple[int, int],
    limit: int,
    most: int,
    rounds: int,
    budgets: Budgets,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function ``mapInArrow`` runs on the one partition of the stratum's relation: its
    rows (stored columns and `KIND`) taken on to the fixpoint or as far as `rounds_from`
    goes, returned in ``out`` (the stored columns, ``__new`` and ``__rounds``): every
    version known, and those still waiting to be joined again, flagged new."""
    (name,) = stratum.relations
    schema = schemas[name]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = [b for b in batches if b.num_rows]
        if not got:
            return
        rows = from_arrow(pa.Table.from_batches(got))
        kind = rows.pop(KIND)
        stored = arrow_schema(schema)
        known = take(rows, kind != EARLIER)
        delta = take(rows, kind == WAITING)
        versions, waiting, ran = local.rounds_from(
            stratum,
            schemas,
            {r: from_arrow(t) for r, t in lower.items()},
            {name: take(rows, kind == EARLIER)},
            {name: known},
            {name: delta},
            window,
            limit,
            most,
            rounds,
            budgets,
        )
        parts = [(versions[name], False)]
        if waiting is not None:
            parts.append((waiting[name], True))
        table = to_arrow(
            concat(
                [
                    {
                        **{c: p[c] for c in stored.names},
                        NEW: np.full(height(p), new),
                        ROUNDS: np.full(height(p), ran, np.int64),
                    }
                    for p, new in parts
                ]
            ),
            pa.schema([*stored, pa.field(NEW, pa.bool_()), pa.field(ROUNDS, pa.int64())]),
        )
        yield from as_stored(table, out).to_batches(max_chunksize=1 << 16)

    return run
