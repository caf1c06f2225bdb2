"""The events an action handler listens to, read from a range of epochs of the warehouse."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from functools import reduce
from itertools import groupby

from pyspark.sql import Column
from pyspark.sql import functions as F

from dagster_pomo.engine.actions import ActionEvent, Subscription, idempotency_key
from dagster_pomo.engine.local.arrow_schemas import arrow_schema
from dagster_pomo.engine.spark import epoch_changes
from dagster_pomo.engine.spark.stored_versions import struct_of
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.engine.versions import value_order
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
    relation for the whole range, streamed to the driver a Spark partition at a time (or,
    on a local warehouse holding few of them, read here: see `Warehouse.holds_few`)."""
    ordered = sorted(subs, key=lambda s: s.relation)
    streams = [
        _relation_events(wh, schemas[relation], relation, list(group), keys)
        for relation, group in groupby(ordered, key=lambda s: s.relation)
    ]
    # Each stream is in epoch order; ties keep the streams' (relations') order.
    yield from heapq.merge(*streams, key=lambda event: int(event.epoch))


def _event(sub: Subscription, columns: list[str], args: tuple, t: int, epoch: str) -> ActionEvent:
    key = idempotency_key(sub.handler, sub.relation, args, t)
    return ActionEvent(
        key, sub.handler, sub.relation, dict(zip(columns, args, strict=True)), t, epoch
    )


def _relation_events(
    wh: Warehouse, schema: Schema, relation: str, subs: list[Subscription], keys: Sequence[str]
) -> Iterator[ActionEvent]:
    columns = list(schema.columns)
    if wh.holds_few(relation, keys):
        yield from _read_here(wh, schema, relation, subs, keys)
        return
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
        yield _event(subs[0], columns, values[:-2], int(values[-2]), str(values[-1]))


def _read_here(
    wh: Warehouse, schema: Schema, relation: str, subs: list[Subscription], keys: Sequence[str]
) -> Iterator[ActionEvent]:
    """`_relation_events` for a local warehouse holding few versions in ``keys``: read by
    this process (no Spark), in the same order."""
    columns = list(schema.columns)
    first: dict[tuple, int] = {}  # (args, t) -> the first epoch holding it
    for key in sorted(keys, key=int):
        table = wh.read_table(relation, [key], arrow_schema(schema)).select([*columns, "t"])
        for row in table.to_pylist():
            if any(_holds(s, row) for s in subs):
                first.setdefault((tuple(row[c] for c in columns), row["t"]), int(key))
    found = sorted(first.items(), key=lambda i: (i[1], i[0][1], [value_order(v) for v in i[0][0]]))
    for (args, t), epoch in found:
        yield _event(subs[0], columns, args, int(t), str(epoch))


def withdrawn_events(
    wh: Warehouse,
    schemas: Mapping[str, Schema],
    subs: Sequence[Subscription],
    keys: Sequence[str],
) -> list[ActionEvent]:
    """Each distinct event that ``subs`` (all of one handler) match, withdrawn by the latest
    version of one of the epochs ``keys`` (see `epoch_changes`) and stored in no epoch now
    (an event may move to another epoch), with the epoch that withdrew it; in the order of
    `range_events`. Keyed by its idempotency key."""
    out: list[ActionEvent] = []
    ordered = sorted(subs, key=lambda s: s.relation)
    for relation, group in groupby(ordered, key=lambda s: s.relation):
        mine, columns = list(group), list(schemas[relation].columns)
        found: dict[tuple[tuple, int], str] = {}
        for key in sorted(keys, key=int):
            table = epoch_changes.withdrawn_events(wh, relation, key)
            for row in [] if table is None else table.to_pylist():
                if any(_holds(s, row) for s in mine):
                    found.setdefault((tuple(row[c] for c in columns), row["t"]), key)
        stored = _stored(wh, schemas[relation], relation, {t for _, t in found})
        gone = sorted(
            ((key, t, args) for (args, t), key in found.items() if (args, t) not in stored),
            key=lambda g: (int(g[0]), g[1], [value_order(v) for v in g[2]]),
        )
        out += [_event(mine[0], columns, args, t, key) for key, t, args in gone]
    return sorted(out, key=lambda e: int(e.epoch))


def _stored(wh: Warehouse, schema: Schema, relation: str, times: set[int]) -> set[tuple]:
    """The events ``(args, t)`` of ``relation`` stored now, in any epoch, at ``times``."""
    if not times:
        return set()
    columns = [*schema.columns, "t"]
    if wh.is_local:
        keys = wh.stored_keys(relation)
        span = (min(times), max(times) + 1)
        table = wh.read_table(relation, keys, arrow_schema(schema), times=span).select(columns)
        rows = [tuple(r.values()) for r in table.to_pylist()]
    else:
        df = wh.read_all(relation, struct_of(schema)).filter(F.col("t").isin(sorted(times)))
        rows = [tuple(r) for r in df.select(*columns).distinct().collect()]
    return {(r[:-1], r[-1]) for r in rows if r[-1] in times}


def _holds(sub: Subscription, row: Mapping[str, object]) -> bool:
    """Whether a stored version ``row`` is an event ``sub`` listens to."""
    return all(row[c] == v for c, v in sub.equals) and all(
        row[c] == row[cols[0]] for cols in sub.same for c in cols[1:]
    )
