"""What a warehouse holds of a corpus, read for people and for action handlers.

The Dagster layer reports row counts and previews per partition, and hands stored events
to handlers; it reads them through this object (opened by `engine.driver`), never through
Spark. On a warehouse on this machine's disk, counts come from the Parquet footers and
previews from the files, with no Spark job; elsewhere one Spark job answers each.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Collection, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from dagster_pomo.engine import event_lines
from dagster_pomo.engine.actions import ActionEvent, Subscription
from dagster_pomo.engine.local.arrow_schemas import arrow_schema
from dagster_pomo.engine.spark import epoch_changes
from dagster_pomo.engine.spark.handler_events import range_events, withdrawn_events
from dagster_pomo.engine.spark.rule_frames import united
from dagster_pomo.engine.spark.stored_versions import collect_versions, read_versions, struct_of
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.engine.stored import UNCHANGED, Change
from dagster_pomo.engine.versions import Version, from_record, merge_versions, output_order
from dagster_pomo.plan.schema import PROV, Schema
from dagster_pomo.timeline import NEVER


class Results:
    """What a warehouse holds, read by Spark or, for a local one, by this process in Arrow
    (`engine.stored.StoredResults`)."""

    def __init__(self, warehouse: Warehouse, schemas: Mapping[str, Schema]) -> None:
        self.wh = warehouse
        self.schemas = schemas

    def partition_rows(self, relation: str, keys: Sequence[str]) -> dict[str, int]:
        """How many versions each epoch of ``keys`` holds (0 for one not stored)."""
        if self.wh.is_local:
            stored = self.wh.stored_keys(relation)
            return {k: self.wh.stored_rows(relation, k) if k in stored else 0 for k in keys}
        df = self.wh.read(relation, struct_of(self.schemas[relation]), keys)
        epoch = F.regexp_extract(F.input_file_name(), "/epoch=([^/]+)/", 1).alias("epoch")
        counted = {r["epoch"]: r["count"] for r in df.groupBy(epoch).count().collect()}
        return {k: int(counted.get(k, 0)) for k in keys}

    def preview(self, relation: str, key: str, limit: int) -> list[dict[str, Any]]:
        """The first ``limit`` versions of epoch ``key`` by time, arguments and known time:
        each its stored columns by name (aggregates as ``_agg_<fn>``), ``t``, ``kt``, ``exp``."""
        schema = self.schemas[relation]
        order = ["t", *schema.columns, "kt"]
        if self.wh.is_local:
            table = self.wh.read_table(relation, [key], arrow_schema(schema))
            table = table.sort_by([(c, "ascending") for c in order]).slice(0, limit)
            return table.to_pylist()
        df = self.wh.read(relation, struct_of(schema), [key])
        return [r.asDict() for r in df.orderBy(*order).limit(limit).collect()]

    def handler_events(
        self, subs: Sequence[Subscription], keys: Sequence[str]
    ) -> Iterator[ActionEvent]:
        """Each event of the epochs ``keys`` that ``subs`` (one handler's) listen to, once,
        epoch by epoch (see `handler_events.range_events`)."""
        return range_events(self.wh, self.schemas, subs, keys)

    def withdrawn_handler_events(
        self, subs: Sequence[Subscription], keys: Sequence[str]
    ) -> list[ActionEvent]:
        """Each event ``subs`` (one handler's) listen to that the latest versions of the
        epochs ``keys`` withdrew and no epoch holds now, with the epoch that withdrew it
        (see `handler_events.withdrawn_events`)."""
        return withdrawn_events(self.wh, self.schemas, subs, keys)

    def versions_where(
        self,
        relation: str,
        keys: Sequence[str],
        made_by: int | None = None,
        expiring_from: int | None = None,
        t: int | None = None,
    ) -> list[Version]:
        """The versions of epochs ``keys`` of ``relation`` made by ``made_by`` (``kt`` at most),
        expiring at ``expiring_from`` or later and stamped ``t``, where given: Spark filters,
        only they come to this process."""
        schema = self.schemas[relation]
        df = self.wh.read(relation, struct_of(schema), keys)
        if made_by is not None:
            df = df.filter(F.col("kt") <= made_by)
        if expiring_from is not None:
            df = df.filter(F.col("exp") >= expiring_from)
        if t is not None:
            df = df.filter(F.col("t") == t)
        return collect_versions(df, schema)

    def events(self, relation: str, keys: Sequence[str], aggregating: bool) -> Iterator[Version]:
        """The relation's events, one per identity (arguments and ``t``), as outputs show them
        (`versions.merge_versions`: an aggregate's latest version, else the smallest ``kt``
        and the largest ``exp``), sorted by time then arguments: merged and sorted by Spark,
        streamed to this process (or, on a local warehouse holding few of them, read, merged
        and sorted here: see `Warehouse.holds_few`)."""
        schema = self.schemas[relation]
        if self.wh.holds_few(relation, keys):
            rows = read_versions(self.wh, schema, keys)
            yield from sorted(merge_versions(rows, aggregating), key=output_order)
            return
        df = self._merged(relation, keys, aggregating)
        # One sorted partition: one job streams it in order (a global sort would sample the
        # data first and pull each partition with a job of its own); Spark spills the sort.
        df = df.repartition(1).sortWithinPartitions("t", *schema.columns)
        for rec in df.toLocalIterator():
            yield from_record(tuple(rec), schema)

    def write_events(
        self,
        relation: str,
        keys: Sequence[str],
        aggregating: bool,
        path: Path,
        aggregate_keys: Sequence[str],
    ) -> int | None:
        """Write the relation's events (as `events` gives them) to ``path``, one JSON object a
        line as `versions.output_object` makes it. From a local warehouse, by this process
        in Arrow where `event_lines` writes the relation's values, a range of times at a time
        (about `event_lines.HELD` versions each), and no range's files hold more than
        `event_lines.ROWS` versions (no Spark job, whatever the relation's size);
        else by Spark partition by partition in sort order (the lines made by Spark itself
        where `_json_line` can, else by its Python workers, the rows going to them as
        Arrow), then joined into ``path``: nothing passes through this process. How many
        were written; None (nothing done) when the warehouse holds few of them (`events`
        reads them here) or it and Spark's workers do not share this machine's disk."""
        if not self.wh.is_local:
            return None
        schema = self.schemas[relation]
        if event_lines.writes(schema):
            files = self.wh.stored_times(relation, keys)
            slices = event_lines.time_slices(files, event_lines.HELD)
            # A range reads at most its files' versions (a file may span two ranges).
            if max(sum(files[f][0] for f in part) for *_, part in slices) <= event_lines.ROWS:
                stored = arrow_schema(schema)
                reads = [
                    partial(self.wh.read_table, relation, part, stored, times=(lo, hi))
                    for lo, hi, part in slices
                ]
                return event_lines.write(reads, schema, aggregating, aggregate_keys, path)
        if self.wh.holds_few(relation, keys) or not _local_master(self.wh.spark):
            return None  # few: `events` reads them here, with no Spark job
        order = ["t", *schema.columns]
        df = self._merged(relation, keys, aggregating, order).orderBy(*order)
        names = list(aggregate_keys)
        parts = path.with_name(f".{path.name}.parts")
        shutil.rmtree(parts, ignore_errors=True)
        native = _json_line(schema, names)
        if native is not None:  # Spark writes the lines itself: no Python worker
            df.select(native.alias("value")).write.text(str(parts.resolve()))
            return _joined(parts, path)

        def lines(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            import json

            from dagster_pomo.engine.versions import event_object, from_record

            for batch in batches:  # as Arrow both ways: no row pickled
                made = [
                    json.dumps(event_object(from_record(tuple(rec.values()), schema), names, prov))
                    for rec in batch.to_pylist()
                ]
                yield pa.RecordBatch.from_arrays([pa.array(made, pa.string())], names=["value"])

        prov = schema.provenance
        df.mapInArrow(lines, "value string").write.text(str(parts.resolve()))
        return _joined(parts, path)

    def _merged(
        self, relation: str, keys: Sequence[str], aggregating: bool, order: Sequence[str] = ()
    ) -> DataFrame:
        """One row per event of ``relation`` (see `events`): its columns, aggregates, ``t``,
        ``kt``, ``exp`` and ``_tau``. Spread by ranges of ``order`` (columns of the event's
        identity) when given: the versions of an event meet in one partition, as merging
        needs, in the order a sort on ``order`` needs, so the two take one shuffle, not
        two (3.9 million events written: 10.1 s -> 6.6 s)."""
        schema = self.schemas[relation]
        df = self.wh.read(relation, struct_of(schema), keys)
        if order:
            df = df.repartitionByRange(*order)
        identity = [*schema.columns, "t"]
        aggs = list(schema.aggregate_columns)
        prov = [PROV] if schema.provenance else []
        if aggregating:
            latest = Window.partitionBy(*identity).orderBy(F.desc("kt"), F.desc("_tau"))
            if prov:  # the union over all versions of the event
                df = df.withColumn(PROV, united(PROV, Window.partitionBy(*identity)))
            df = df.withColumn("__n", F.row_number().over(latest)).filter(F.col("__n") == 1)
            df = df.drop("__n")
        else:
            df = df.groupBy(*identity).agg(  # no aggregate columns: not an aggregate
                F.min("kt").alias("kt"),
                F.max("exp").alias("exp"),
                F.min("_tau").alias("_tau"),
                *[united(PROV).alias(PROV) for _ in prov],
            )
        return df.select(*schema.columns, *aggs, "t", "kt", "exp", "_tau", *prov)

    def changes(
        self, relation: str, keys: Sequence[str], kept: Collection[str] = ()
    ) -> dict[str, Change]:
        """What the stored version of each epoch of ``keys`` added and withdrew, in events
        (see `epoch_changes`); nothing for those ``kept`` (a run that did not evaluate them
        again changed nothing there); an epoch not stored is left out."""
        found = {
            k: epoch_changes.change_of(self.wh, relation, k) if k not in kept else UNCHANGED
            for k in keys
        }
        return {k: c for k, c in found.items() if c is not None}

    def withdrawn(self, relation: str, keys: Sequence[str]) -> list[tuple[tuple, int, str]]:
        """The events (arguments, time) the latest versions of the epochs ``keys`` of
        ``relation`` withdrew, each with its epoch, in time order."""
        out = []
        columns = list(self.schemas[relation].columns)
        for key in keys:
            table = epoch_changes.withdrawn_events(self.wh, relation, key)
            for row in [] if table is None else table.to_pylist():
                out.append((tuple(row[c] for c in columns), int(row["t"]), key))
        return sorted(out, key=lambda w: (w[1], int(w[2])))

    def changed_events(self, relation: str, key: str) -> pa.Table | None:
        """The events the stored version of epoch ``key`` of ``relation`` added (``weight``
        1) and withdrew (-1): its arguments and ``t``; None when the epoch is not stored."""
        return epoch_changes.changed_events(self.wh, relation, key)

    def stored_keys(self, relation: str) -> set[str]:
        """The epochs of ``relation`` the warehouse holds."""
        return self.wh.stored_keys(relation)

    def read_text(self, name: str) -> str | None:
        """A file the engine keeps beside the corpus's relations, or None."""
        return self.wh.read_text(name)

    def write_text(self, name: str, text: str) -> str:
        """Replace a file kept beside the corpus's relations; its path."""
        return self.wh.write_text(name, text)


# Stored column types whose values Spark writes as Python's `json` does: integers (times
# are stored as integers) and booleans. Text (escapes) and floats (their shortest form)
# are Python's to write.
SPARK_WRITES = {"int", "bool"}


def _json_line(schema: Schema, keys: Sequence[str]) -> Column | None:
    """An event's output line (`versions.output_object` as `json.dumps` writes it) as a Spark
    expression, when every value of the relation is one Spark writes the same (see
    `SPARK_WRITES`) and it carries no provenance; else None."""
    types = [*schema.types, *(typ for _, _, typ in schema.aggregates)]
    if schema.provenance or not set(types) <= SPARK_WRITES:
        return None
    args = F.concat_ws(", ", *[F.col(c).cast("string") for c in schema.columns])
    aggs = [
        F.concat(F.lit(json.dumps(key) + ": "), F.col(column).cast("string"))
        for key, column in zip(keys, schema.aggregate_columns, strict=True)
    ]
    never = F.col("exp") >= F.lit(NEVER)
    return F.concat(
        F.lit('{"args": ['),
        args if schema.columns else F.lit(""),
        F.lit('], "t": '),
        F.col("t").cast("string"),
        F.lit(', "exp": '),
        F.when(never, F.lit("null")).otherwise(F.col("exp").cast("string")),
        F.lit(', "aggregates": {'),
        F.concat_ws(", ", *aggs) if aggs else F.lit(""),
        F.lit("}}"),
    )


def _joined(parts: Path, path: Path) -> int:
    """Spark's part files (in order) joined into ``path``, then removed; how many lines."""
    count = 0
    with open(path, "wb") as out:
        for part in sorted(parts.glob("part-*")):
            with open(part, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    count += chunk.count(b"\n")
                    out.write(chunk)
    shutil.rmtree(parts, ignore_errors=True)
    return count


def _local_master(spark: Any) -> bool:
    """Whether ``spark`` runs its workers on this machine (local mode, not Spark Connect,
    whose sessions have no context to ask)."""
    try:
        return str(spark.sparkContext.master).startswith("local")
    except Exception:  # noqa: BLE001 - Spark Connect raises on any use of the context
        return False
