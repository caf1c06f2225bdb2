"""The events an action handler listens to, read from a range of epochs of the warehouse."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from functools import reduce
from itertools import groupby

from pyspark.sql import Column
from pyspark.sql import functions as F

from dagster_pomo.engine.actions import ActionEvent, Subscription, idempotency_key
from dagster_pomo.engine.spark.evaluator import struct_of
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.plan.schema import Schema


def _matches(sub: Subscription) -> Column:
    conds = [F.col(c) == F.lit(v) for c, v in sub.equals]
    conds += [F.col(cols[0]) == F.col(c) for cols in sub.same for c in cols[1:]]
    return reduce(Column.__and__, conds, F.lit(True))


def range_events(
    wh: Warehouse,
    schemas: Mapping[str, Schema],
    subs: Sequence[Subscription],
    keys: Sequence[str],
) -> Iterator[ActionEvent]:
    """Each distinct ``(relation, args, t)`` stored in the epochs ``keys`` that ``subs`` (all
    of one handler) match, once, with the first of those epochs that holds it: epoch by
    epoch, and within an epoch relation by relation, in time order. One Spark read per
    relation for the whole range, streamed to the driver a Spark partition at a time."""
    ordered = sorted(subs, key=lambda s: s.relation)
    streams = [
        _relation_events(wh, schemas[relation], relation, list(group), keys)
        for relation, group in groupby(ordered, key=lambda s: s.relation)
    ]
    # Each stream is in epoch order; ties keep the streams' (relations') order.
    yield from heapq.merge(*streams, key=lambda event: int(event.epoch))


def _relation_events(
    wh: Warehouse, schema: Schema, relation: str, subs: list[Subscription], keys: Sequence[str]
) -> Iterator[ActionEvent]:
    columns = list(schema.columns)
    df = wh.read(relation, struct_of(schema), keys)
    df = df.filter(reduce(Column.__or__, (_matches(s) for s in subs)))
    epoch = F.regexp_extract(F.input_file_name(), "/epoch=([^/]+)/", 1).cast("long")
    df = (
        df.select(*columns, "t", epoch.alias("__epoch"))
        .groupBy(*columns, "t")
        .agg(F.min("__epoch").alias("__epoch"))
        .orderBy("__epoch", "t", *columns)
    )
    for row in df.toLocalIterator():
        values = tuple(row)
        args, t = values[:-2], int(values[-2])
        yield ActionEvent(
            idempotency_key(subs[0].handler, relation, args, t),
            subs[0].handler,
            relation,
            dict(zip(columns, args, strict=True)),
            t,
            str(values[-1]),
        )
