"""The rounds of a recursion that is not linear, inside one Spark task.

A Spark round costs a job, its stages and a plan built again, whatever the size of its
delta: a counter that adds one row a round pays that a thousand times. When the stratum's
relations fit one task (`Policy.task_rows` versions), the rounds after the first run
there instead, with this process's rules (`stratum.rounds_from`) over the relations' rows,
their earlier epochs' and the lower relations' (shipped with the task): a round costs
what its rows cost. The task hands back what it knows, the versions still waiting to be
joined flagged, when the relations outgrow it or a round would pass a limit: Spark's
rounds go on from there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa

from dagster_pomo.engine.budgets import Budgets
from dagster_pomo.engine.local import stratum as local
from dagster_pomo.engine.local.arrow_schemas import arrow_schema
from dagster_pomo.engine.local.column_joins import Cols, from_arrow, height, take, to_arrow
from dagster_pomo.engine.local.linear_fixpoint import NEW, ROUNDS
from dagster_pomo.plan.corpus import StratumPlan
from dagster_pomo.plan.schema import Schema

KIND = "__kind"  # what an input row is: one of the three below
KNOWN, WAITING, EARLIER = 0, 1, 2  # a version so far, one the next round joins, an earlier epoch's
RELATION = "__relation"  # which of the stratum's relations a row is of: its index


def column(index: int, name: str) -> str:
    """The column that carries column ``name`` of the stratum's relation ``index``: the
    relations travel in one table, each row holding one relation's columns, the others
    null."""
    return f"__{index}_{name}"


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
    """The function ``mapInArrow`` runs on the one partition of the stratum's relations:
    their rows (`RELATION`, `KIND` and each relation's stored columns, see `column`) taken
    on to the fixpoint or as far as `rounds_from` goes, returned in ``out`` (`RELATION`, the
    columns, ``__new`` and ``__rounds``): every version known, and those still waiting to be
    joined again, flagged new."""
    names = list(stratum.relations)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = [b for b in batches if b.num_rows]
        if not got:
            return
        table = pa.Table.from_batches(got)
        relation = table[RELATION].to_numpy()
        kind = table[KIND].to_numpy()
        earlier, known, delta = {}, {}, {}
        for i, name in enumerate(names):
            rows = _rows_of(table, relation == i, i, arrow_schema(schemas[name]))
            own = kind[relation == i]
            earlier[name] = take(rows, own == EARLIER)
            known[name] = take(rows, own != EARLIER)
            delta[name] = take(rows, own == WAITING)
        versions, waiting, ran = local.rounds_from(
            stratum,
            schemas,
            {r: from_arrow(t) for r, t in lower.items()},
            earlier,
            known,
            {n: d for n, d in delta.items() if height(d)},
            window,
            limit,
            most,
            rounds,
            budgets,
        )
        for i, name in enumerate(names):
            parts = [(versions[name], False)]
            if waiting is not None and name in waiting:
                parts.append((waiting[name], True))
            for rows, new in parts:
                if height(rows):
                    yield from _out(rows, new, ran, i, arrow_schema(schemas[name]), out)

    return run


def _rows_of(table: pa.Table, mask: np.ndarray, index: int, stored: pa.Schema) -> Cols:
    """The rows of relation ``index`` in ``table``, in its stored columns and types."""
    own = table.filter(pa.array(mask)).select([column(index, f.name) for f in stored])
    return from_arrow(own.rename_columns(stored.names).cast(stored))


def _out(
    rows: Cols, new: bool, ran: int, index: int, stored: pa.Schema, out: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """``rows`` of relation ``index`` in the task's output ``out``, the other relations'
    columns null."""
    mine = to_arrow(rows, stored)
    n = mine.num_rows
    given = {column(index, f.name): mine[f.name] for f in stored}
    given[RELATION] = pa.array(np.full(n, index, np.int64))
    given[NEW] = pa.array(np.full(n, new))
    given[ROUNDS] = pa.array(np.full(n, ran, np.int64))
    arrays = [given[f.name] if f.name in given else pa.nulls(n, f.type) for f in out]
    yield from pa.table(arrays, schema=out).to_batches(max_chunksize=1 << 16)
