"""What a warehouse holds of a corpus, read for people and for action handlers.

The Dagster layer reports row counts and previews per partition, and hands stored events
to handlers; it reads them through this object (opened by `engine.driver`), never through
Spark. On a warehouse on this machine's disk, counts come from the Parquet footers and
previews from the files, with no Spark job; elsewhere one Spark job answers each.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql import Window
from pyspark.sql import functions as F

from dagster_pomo.engine.actions import ActionEvent, Subscription
from dagster_pomo.engine.inprocess.rules import arrow_schema
from dagster_pomo.engine.spark.evaluator import collect_versions, struct_of
from dagster_pomo.engine.spark.handler_events import range_events
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.engine.versions import Version
from dagster_pomo.plan.schema import Schema


class Results:
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
        """The first ``limit`` versions of epoch ``key`` by time and arguments: each its
        stored columns by name (aggregates as ``_agg_<fn>``), ``t`` and ``exp``."""
        schema = self.schemas[relation]
        order = ["t", *schema.columns]
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
        streamed to this process a partition at a time."""
        schema = self.schemas[relation]
        df = self.wh.read(relation, struct_of(schema), keys)
        identity = [*schema.columns, "t"]
        aggs = [f"_agg_{fn}" for fn, _, _ in schema.aggregates]
        if aggregating:
            latest = Window.partitionBy(*identity).orderBy(F.desc("kt"), F.desc("_tau"))
            df = df.withColumn("__n", F.row_number().over(latest)).filter(F.col("__n") == 1)
            df = df.drop("__n")
        else:
            df = df.groupBy(*identity).agg(  # no aggregate columns: not an aggregate
                F.min("kt").alias("kt"), F.max("exp").alias("exp"), F.min("_tau").alias("_tau")
            )
        df = df.select(*schema.columns, *aggs, "t", "kt", "exp", "_tau")
        # One sorted partition: one job streams it in order (a global sort would sample the
        # data first and pull each partition with a job of its own); Spark spills the sort.
        df = df.repartition(1).sortWithinPartitions("t", *schema.columns)
        n, k = len(schema.columns), len(aggs)
        for rec in df.toLocalIterator():
            values = tuple(rec)
            t, kt, exp, tau = values[n + k : n + k + 4]
            yield Version(t, values[:n], kt, exp, values[n : n + k], tau)

    def stored_keys(self, relation: str) -> set[str]:
        """The epochs of ``relation`` the warehouse holds."""
        return self.wh.stored_keys(relation)

    def read_text(self, name: str) -> str | None:
        """A file the engine keeps beside the corpus's relations, or None."""
        return self.wh.read_text(name)

    def write_text(self, name: str, text: str) -> str:
        """Replace a file kept beside the corpus's relations; its path."""
        return self.wh.write_text(name, text)
