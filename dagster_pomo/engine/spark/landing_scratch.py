"""A landing read by Spark's tasks (see `landing.staged`): its counts and bad lines, and
each input relation's events to store; `InScratch` when they were read into a scratch
folder of the warehouse (a cluster, Spark Connect)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import DecimalType, LongType, StringType, StructField, StructType

from dagster_pomo.engine.ingest import NOTHING_TO_DELETE, Ingested, Quarantined
from dagster_pomo.engine.local.arrow_schemas import arrow_schema
from dagster_pomo.engine.spark import frames
from dagster_pomo.engine.spark.landing_tasks import BAD, deleting, facts_by_epoch, signed
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.engine.versions import (
    Version,
    record,
    row_hash,
)
from dagster_pomo.lang import Program
from dagster_pomo.plan.schema import Schema
from dagster_pomo.timeline import Epoch, epoch_key

HELD = 1_000  # bad lines this process holds (to show); the quarantine file gets them all


@dataclass
class Staged:
    """A landing read by Spark's tasks (see `staged`): its counts and bad lines, and each
    input relation's events to store (`InScratch`, `InPlace`)."""

    spark: SparkSession
    wh: Warehouse
    program: Program
    types: dict[str, tuple[str, ...]]  # each input relation's column types, as stored
    schemas: dict[str, Schema]  # every relation's, from those types
    inputs: list[Schema]
    files: list[str]  # the files read, as given (``f`` of a row is its index)
    got: dict[str, Any]  # the counts (see `metrics`)
    bad_lines: DataFrame  # file, line, reason, text of each bad line

    @property
    def lines(self) -> int:
        return int(self.got["lines"])

    @property
    def bad(self) -> int:
        return int(self.got["bad"])

    @property
    def times(self) -> list[int]:
        """The first and last time of an accepted event; none when none was accepted."""
        return [] if self.got["first"] is None else [self.got["first"], self.got["last"]]

    def store(
        self, epochs: list[Epoch], facts: Mapping[str, list[Version]], first_of_all: bool = True
    ) -> dict[str, tuple[int, int]]:
        """Each input relation's events of ``epochs`` (consecutive; the corpus's ``facts``
        of it too; with ``first_of_all``, ``epochs`` start the run, so earlier times go to
        the first, as `Driver.key_for` places them) stored in their epochs' partitions; how
        many each stored and the sum of their `versions.row_hash` values (see
        `versions.digest_of`), when the tasks hashed their rows (`staged`'s ``digests``)."""
        raise NotImplementedError

    def per_file(self) -> dict[str, tuple[int, int | None, int | None]]:
        """Per file read: its lines, and the first and last time of its accepted events."""
        raise NotImplementedError

    def quarantined(self) -> DataFrame:
        """The bad lines, in order of file and line."""
        return self.bad_lines.orderBy("file", "line")

    def held(self, ingested: Ingested, limit: int | None = HELD) -> None:
        """``ingested``'s counts and bad lines from what the tasks read: the first ``limit``
        bad lines held (all with None), and all of them streamed (`Ingested.quarantine_lines`)
        until the scratch folder is removed."""
        ingested.files = list(self.files)
        ingested.files_read = len(self.files)
        ingested.lines_read = self.lines
        ingested.repeats = int(self.got.get("repeats") or 0)
        ingested.withdrawn = int(self.got.get("withdrawn") or 0)
        repeated = ingested.repeats + 2 * ingested.withdrawn
        ingested.accepted_by_spark = self.lines - self.bad - repeated
        if not self.bad:
            return
        bad = self.quarantined()
        held = bad if limit is None else bad.limit(limit)
        ingested.quarantined = [Quarantined(**r.asDict()) for r in held.collect()]
        ingested.bad = self.bad
        if limit is not None:
            ingested.all_quarantined = lambda: (
                Quarantined(**r.asDict()) for r in bad.toLocalIterator()
            )


@dataclass
class InScratch(Staged):
    """The landing read into a scratch folder of the warehouse, wherever it is (one row a
    line, see `scratch_schema`); each relation's events then stored by Spark's writer."""

    rows: DataFrame  # the scratch folder's rows

    def store(
        self, epochs: list[Epoch], facts: Mapping[str, list[Version]], first_of_all: bool = True
    ) -> dict[str, tuple[int, int]]:
        """One Spark job a relation that has any events to store (and two more for one with
        delete lines, see `_deletions`)."""
        out: dict[str, tuple[int, int]] = {}
        gone = {i: self._deletions(i, s) for i, s in enumerate(self.inputs) if self.got[f"d{i}"]}
        for i, schema in enumerate(self.inputs):
            mine = facts.get(schema.name, [])
            if epochs and (self.got[f"n{i}"] or mine):
                out[schema.name] = self._store(i, schema, mine, epochs, first_of_all, gone.get(i))
        return out

    def _deletions(self, i: int, schema: Schema) -> DataFrame:
        """The events the delete lines of input relation ``i`` name, each once; as
        `ingest.withdraw` judges them over every line read: the first line naming an event
        no line inserts quarantined, the others repeats (counted in ``got``)."""
        keys = [*(f"c{i}_{j}" for j in range(len(schema.columns))), "t"]
        lines = self.rows.where(F.col("r") == deleting(i))
        first = lines.groupBy(*keys).agg(F.min(F.struct("f", "line", "file", "text")).alias("w"))
        first = first.select(*keys, "w.*").cache()
        inserted = self.rows.where(F.col("r") == i).select(*keys).distinct()
        unmatched = first.join(inserted, [*keys], "left_anti")
        reason = F.lit(NOTHING_TO_DELETE).alias("reason")
        bad = unmatched.select("file", "line", reason, "text").cache()
        named, nothing = first.count(), bad.count()
        self.got["repeats"] = self.got.get("repeats", 0) + self.got[f"d{i}"] - named
        self.got["withdrawn"] = self.got.get("withdrawn", 0) + named - nothing
        self.got["bad"] += nothing
        self.bad_lines = self.bad_lines.unionByName(bad)
        return first.select(*keys)

    def _store(
        self,
        i: int,
        schema: Schema,
        facts: list[Version],
        epochs: list[Epoch],
        earlier: bool,
        gone: DataFrame | None = None,
    ) -> tuple[int, int]:
        first, last, end = epochs[0].start, epochs[-1].start, epochs[-1].end
        columns = [F.col(f"c{i}_{j}").alias(c) for j, c in enumerate(schema.columns)]
        kt, tau = F.col("t").alias("kt"), F.lit(0).cast("long").alias("_tau")
        chosen = (F.col("t") < end) & F.col("epoch").between(first, last)
        rows = self.rows.where((F.col("r") == i) & chosen)
        if gone is not None:  # the events delete lines name, withdrawn
            rows = rows.join(gone, [*gone.columns], "left_anti")
        rows = rows.select(*columns, "t", kt, "exp", tau, F.col("epoch").cast("string"), "h")
        placed = facts_by_epoch(facts, epochs, earlier)
        if placed:
            struct = from_arrow_schema(arrow_schema(schema))  # the stored columns
            with_epoch = StructType(
                [*struct.fields, StructField("epoch", StringType()), StructField("h", LongType())]
            )
            records = [
                (*record(f, schema), str(key), signed(row_hash(f)))
                for key, versions in placed.items()
                for f in versions
            ]
            rows = rows.unionByName(frames.local(self.spark, records, with_epoch))
        # Each event once, where it first came (`versions.first_of_each_event`): a repeated
        # line, or a line repeating a fact, is the same row whole (its hash too). The rows
        # of an epoch meet in one task, grouped, then back in the order they came, so an
        # epoch's file holds them as this process would write them (sums downstream add
        # them in the same order, to the same last bit).
        given = Observation(f"given-{i}")
        rows = rows.observe(given, F.count(F.lit(1)).alias("n"))
        order = rows.columns
        keys = [*schema.columns, "t", "epoch"]  # the epoch follows from the time
        others = ["_at", *(c for c in order if c not in keys)]  # the earliest copy's
        rows = rows.withColumn("_at", F.monotonically_increasing_id()).repartition("epoch")
        rows = rows.groupBy(*keys).agg(F.min(F.struct(*others)).alias("_first"))
        rows = rows.select(*keys, *(F.col(f"_first.{c}").alias(c) for c in others))
        rows = rows.sortWithinPartitions("_at").select(*order)
        counted = Observation(f"stored-{i}")
        summed = F.sum(F.col("h").cast(DecimalType(38, 0)))
        written = F.collect_set("epoch").alias("keys")
        rows = rows.observe(counted, F.count(F.lit(1)).alias("n"), summed.alias("h"), written)
        keys = [epoch_key(e) for e in epochs]
        self.wh.write_partitioned(schema.name, rows.drop("h"), keys)
        for key in set(keys) - set(counted.get.get("keys") or ()):
            if self.wh.exists(self.wh.path(schema.name, key)):
                self.wh.remove(schema.name, key)  # its last event withdrawn by a delete line
        n = int(counted.get["n"])
        self.got["repeats"] = self.got.get("repeats", 0) + int(given.get["n"]) - n
        return n, int(counted.get["h"] or 0)

    def per_file(self) -> dict[str, tuple[int, int | None, int | None]]:
        """One Spark job."""
        accepted = F.col("r") != BAD
        by_file = self.rows.groupBy("f").agg(
            F.count(F.lit(1)).alias("lines"),
            F.min(F.when(accepted, F.col("t"))).alias("first"),
            F.max(F.when(accepted, F.col("t"))).alias("last"),
        )
        got = {r["f"]: (r["lines"], r["first"], r["last"]) for r in by_file.collect()}
        return {file: got.get(f, (0, None, None)) for f, file in enumerate(self.files)}
