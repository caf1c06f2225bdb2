"""The events an action handler listens to, read from one epoch of the warehouse."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import reduce
from itertools import groupby

from pyspark.sql import Column
from pyspark.sql import functions as F

from dagster_pomo.engine.actions import ActionEvent, Subscription, idempotency_key
from dagster_pomo.engine.schema import Schema
from dagster_pomo.engine.spark.evaluator import struct_of
from dagster_pomo.engine.spark.warehouse import Warehouse


def _matches(sub: Subscription) -> Column:
    conds = [F.col(c) == F.lit(v) for c, v in sub.equals]
    conds += [F.col(cols[0]) == F.col(c) for cols in sub.same for c in cols[1:]]
    return reduce(Column.__and__, conds, F.lit(True))


def epoch_events(
    wh: Warehouse,
    schemas: Mapping[str, Schema],
    subs: Sequence[Subscription],
    key: str,
) -> Iterator[ActionEvent]:
    """Each distinct ``(relation, args, t)`` derived in epoch ``key`` that ``subs`` (all of
    one handler) match, in time order. Streams to the driver a Spark partition at a time."""
    ordered = sorted(subs, key=lambda s: s.relation)
    for relation, group in groupby(ordered, key=lambda s: s.relation):
        schema = schemas[relation]
        columns = list(schema.columns)
        df = wh.read(relation, struct_of(schema), [key])
        df = df.filter(reduce(Column.__or__, (_matches(s) for s in group)))
        df = df.select(*columns, "t").distinct().orderBy("t", *columns)
        for row in df.toLocalIterator():
            values = tuple(row)
            args, t = values[:-1], int(values[-1])
            yield ActionEvent(
                idempotency_key(subs[0].handler, relation, args, t),
                subs[0].handler,
                relation,
                dict(zip(columns, args, strict=True)),
                t,
                key,
            )
