"""A large landing read by Spark's tasks: ingestion that grows with the cluster.

The landing is cut in pieces (`lines.cut`: byte ranges of JSON Lines files, row groups of
Parquet ones) and tasks read them with this process's reader, checks and types
(`ingest.read_piece`), so each line is accepted or quarantined, for the same reason, as
`ingest.ingest_files` would. One Spark job writes what they read to a scratch folder of
the warehouse (each input relation's events, and the bad lines), counting as it writes;
then one job per input relation stores its events in their epochs' partitions. Before
that, only where needed: a job counting the newlines of the pieces of large JSON Lines
files (so line numbers are the file's), and one counting the kinds of values of columns
whose types the data decides. This process holds no event: counts, the first and last
time, the first bad lines; the others are read back in order, streamed, when the
quarantine is written.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StringType, StructField, StructType

from dagster_pomo.engine.ingest import (
    Ingested,
    Quarantined,
    count_kinds,
    expiry,
    input_types,
    read_piece,
    stored_types,
)
from dagster_pomo.engine.inprocess.rules import ARROW
from dagster_pomo.engine.inputs import RunInputs, epoch_range, load_inputs
from dagster_pomo.engine.lines import PARQUET, PIECE_BYTES, Piece, TimeWindow, cut, newlines
from dagster_pomo.engine.lines import numbered as numbered_pieces
from dagster_pomo.engine.spark import frames
from dagster_pomo.engine.spark.evaluator import struct_of
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.engine.versions import Version, record
from dagster_pomo.lang import Program
from dagster_pomo.plan.schema import Schema, infer_schemas
from dagster_pomo.timeline import Epoch, epoch_key

BAD = -1  # the relation index of a bad line in the scratch folder
HELD = 1_000  # bad lines this process holds (to show); the quarantine file gets them all
ROWS_A_BATCH = 65_536


@dataclass(frozen=True)
class Grid:
    """Where an event's epoch starts: on multiples of ``size`` from ``start`` (from time 0
    without one), an event before ``start`` in the first epoch (as `Driver.key_for`)."""

    size: int
    start: int | None

    def key(self, t: int) -> int:
        anchor = self.start or 0
        key = anchor + (t - anchor) // self.size * self.size
        return key if self.start is None else max(key, self.start)


def _tasks(pieces: Sequence[Piece]) -> list[list[Piece]]:
    """Consecutive pieces grouped into tasks of about `PIECE_BYTES` each: a landing of many
    small files is read by few tasks, a large file by one task a piece."""
    out: list[list[Piece]] = []
    size = 0
    for piece in pieces:
        here = _bytes(piece)
        if not out or size + here > PIECE_BYTES:
            out.append([])
            size = 0
        out[-1].append(piece)
        size += here
    return out


def _bytes(piece: Piece) -> int:
    """About how many bytes of its file ``piece`` covers (a Parquet piece: all of them)."""
    if piece.file.endswith(PARQUET):
        return Path(piece.file).stat().st_size
    end = Path(piece.file).stat().st_size if piece.end is None else piece.end
    return max(1, end - piece.start)


def _over_tasks(
    spark: SparkSession,
    tasks: Sequence[Any],
    work: Callable[[Any], Iterator[pa.RecordBatch]],
    schema: pa.Schema,
) -> DataFrame:
    """A frame of what ``work`` makes of each of ``tasks``, one Spark task each."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from work(tasks[index])

    ids = spark.range(len(tasks), numPartitions=max(1, len(tasks)))
    return ids.mapInArrow(run, from_arrow_schema(schema))


COUNTED = pa.schema([("piece", pa.int64()), ("newlines", pa.int64())])
KINDS = pa.schema(
    [("relation", pa.string()), ("column", pa.int64()), ("kind", pa.string()), ("n", pa.int64())]
)


def _numbered(spark: SparkSession, pieces: list[Piece]) -> list[Piece]:
    """``pieces`` with their line numbers known: the newlines of each JSON Lines piece that
    another follows in its file, counted by one task each (one job, when there are any)."""
    counted = [
        i for i, p in enumerate(pieces) if p.end is not None and not p.file.endswith(PARQUET)
    ]
    if not counted:
        return pieces

    def count(i: int) -> Iterator[pa.RecordBatch]:
        piece = pieces[i]
        n = newlines(Path(piece.file), piece.start, piece.end or piece.start)
        yield pa.RecordBatch.from_pylist([{"piece": i, "newlines": n}], schema=COUNTED)

    rows = _over_tasks(spark, counted, count, COUNTED).collect()
    return numbered_pieces(pieces, {pieces[r["piece"]]: r["newlines"] for r in rows})


def _types(
    spark: SparkSession, program: Program, tasks: list[list[Piece]], window: TimeWindow
) -> dict[str, tuple[str, ...]]:
    """Each input relation's column types (as declared: a time is a time): declared, or
    (one job, only when some are not) decided by the kinds of values the tasks count."""
    counts: dict[str, list[Counter[str]]] = {}
    if any(None in rel.types for rel in program.catalog.inputs):

        def kinds(pieces: list[Piece]) -> Iterator[pa.RecordBatch]:
            rows = [
                {"relation": name, "column": i, "kind": kind, "n": n}
                for piece in pieces
                for name, columns in count_kinds(program, piece, window).items()
                for i, column in enumerate(columns)
                for kind, n in column.items()
            ]
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=KINDS)

        for r in _over_tasks(spark, tasks, kinds, KINDS).collect():
            arity = program.catalog[r["relation"]].arity
            columns = counts.setdefault(r["relation"], [Counter() for _ in range(arity)])
            columns[r["column"]][r["kind"]] += r["n"]
    return input_types(program, counts)


def _scratch_schema(inputs: Sequence[Schema]) -> pa.Schema:
    """The scratch folder's rows: a relation's index (``r``, `BAD` for a bad line), the
    event's epoch, time and expiry, each input relation's columns, a bad line's fields."""
    fields = [
        pa.field("r", pa.int32()),
        pa.field("epoch", pa.int64()),
        pa.field("t", pa.int64()),
        pa.field("exp", pa.int64()),
    ]
    for i, schema in enumerate(inputs):
        fields += [pa.field(f"c{i}_{j}", ARROW[typ]) for j, typ in enumerate(schema.types)]
    fields += [
        pa.field("file", pa.string()),
        pa.field("line", pa.int64()),
        pa.field("reason", pa.string()),
        pa.field("text", pa.string()),
    ]
    return pa.schema(fields)


def _reader(
    program: Program,
    inputs: Sequence[Schema],
    types: Mapping[str, tuple[str, ...]],
    window: TimeWindow,
    grid: Grid,
    schema: pa.Schema,
    given: Mapping[str, str],
) -> Callable[[list[Piece]], Iterator[pa.RecordBatch]]:
    """What a task does with its pieces: each line read, checked and typed
    (`ingest.read_piece`), as rows of ``schema`` (see `_scratch_schema`), a batch of one
    relation (or of bad lines) at a time; a bad line's file named as ``given``."""
    index = {s.name: i for i, s in enumerate(inputs)}
    lifetimes = [program.catalog[s.name].lifetime for s in inputs]
    names = {
        i: ["epoch", "t", "exp", *(f"c{i}_{j}" for j in range(len(s.columns)))]
        for i, s in enumerate(inputs)
    }
    names[BAD] = ["file", "line", "reason", "text"]

    def batch(r: int, columns: list[list[Any]]) -> pa.RecordBatch:
        n = len(columns[0])
        given_columns = dict(zip(names[r], columns, strict=True))
        arrays = [
            pa.array(given_columns[f.name], f.type)
            if f.name in given_columns
            else pa.array([r] * n, f.type)
            if f.name == "r"
            else pa.nulls(n, f.type)
            for f in schema
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def read(pieces: list[Piece]) -> Iterator[pa.RecordBatch]:
        held: dict[int, list[list[Any]]] = {}
        for piece in pieces:
            for event in read_piece(program, piece, types, window):
                if isinstance(event, Quarantined):
                    r = BAD
                    columns = held.get(r) or held.setdefault(r, [[] for _ in names[r]])
                    columns[0].append(given.get(event.file, event.file))
                    columns[1].append(event.line)
                    columns[2].append(event.reason)
                    columns[3].append(event.text)
                else:
                    rel, values, t, _ = event
                    r = index[rel.name]
                    columns = held.get(r) or held.setdefault(r, [[] for _ in names[r]])
                    columns[0].append(grid.key(t))
                    columns[1].append(t)
                    columns[2].append(expiry(t, lifetimes[r]))
                    for j, value in enumerate(values, start=3):
                        columns[j].append(value)
                if len(columns[0]) >= ROWS_A_BATCH:
                    yield batch(r, held.pop(r))
        for r, columns in held.items():
            yield batch(r, columns)

    return read


def _metrics(inputs: Sequence[Schema]) -> list[Any]:
    accepted = F.col("r") >= 0
    return [
        F.count(F.lit(1)).alias("lines"),
        F.count_if(F.col("r") == BAD).alias("bad"),
        F.min(F.when(accepted, F.col("t"))).alias("first"),
        F.max(F.when(accepted, F.col("t"))).alias("last"),
        *(F.count_if(F.col("r") == i).alias(f"n{i}") for i in range(len(inputs))),
    ]


def _gone() -> Iterator[Quarantined]:
    raise RuntimeError("the bad lines were kept in the run's scratch folder, removed at its end")


@contextmanager
def read_landing(
    spark: SparkSession,
    wh: Warehouse,
    program: Program,
    paths: Sequence[Path],
    size: int,
    start: int | None = None,
    until: int | None = None,
    window: TimeWindow | None = None,
) -> Iterator[RunInputs]:
    """The landing ``paths`` read by Spark's tasks, each input relation's events stored in
    ``wh`` in the partitions of their epochs (of ``size``, from ``start`` to ``until``, as
    `inputs.prepare` lays them out), the corpus's facts of input relations with them. The
    bad lines can be streamed (`Ingested.quarantine_lines`) until the block ends."""
    from dagster_pomo.engine.lines import DEFAULT_TIMES

    window = window or DEFAULT_TIMES
    # Tasks open files by their full path (they run in folders of their own); the
    # quarantine names each as it was given.
    given = {str(p.absolute()): str(p) for p in paths}
    pieces = _numbered(spark, [p for path in given for p in cut(Path(path), PIECE_BYTES)])
    tasks = _tasks(pieces)
    types = _types(spark, program, tasks, window)
    schemas = infer_schemas(program, stored_types(types))
    inputs = [schemas[rel.name] for rel in program.catalog.inputs]
    layout = _scratch_schema(inputs)
    scratch = wh.scratch("landing")
    ingested: Ingested | None = None
    try:
        read = _reader(program, inputs, types, window, Grid(size, start), layout, given)
        seen = Observation("landing")
        rows = _over_tasks(spark, tasks, read, layout).observe(seen, *_metrics(inputs))
        rows.write.mode("overwrite").partitionBy("r").parquet(scratch)
        got = seen.get
        stored = spark.read.schema(from_arrow_schema(layout)).parquet(scratch)
        landed = [got["first"], got["last"]] if got["first"] is not None else []
        ingested = load_inputs(program, Ingested(types=stored_types(types)))
        times = landed or ingested.times
        ingested.files = [str(p) for p in paths]
        ingested.files_read = len(paths)
        ingested.lines_read = int(got["lines"])
        ingested.accepted_by_spark = int(got["lines"]) - int(got["bad"])
        epochs = epoch_range(times, size, start, until)
        for i, schema in enumerate(inputs):
            facts = ingested.events.get(schema.name, [])
            if got[f"n{i}"] or facts:
                _store(spark, wh, stored, i, schema, facts, epochs.epochs)
        if got["bad"]:
            bad = stored.where(F.col("r") == BAD).select("file", "line", "reason", "text")
            bad = bad.orderBy("file", "line")
            ingested.quarantined = [Quarantined(**r.asDict()) for r in bad.limit(HELD).collect()]
            ingested.bad = int(got["bad"])
            ingested.all_quarantined = lambda: (
                Quarantined(**r.asDict()) for r in bad.toLocalIterator()
            )
        yield RunInputs(ingested, schemas, epochs)
    finally:
        wh.delete(scratch)
        if ingested is not None and ingested.all_quarantined is not None:
            ingested.all_quarantined = _gone


def _store(
    spark: SparkSession,
    wh: Warehouse,
    stored: DataFrame,
    i: int,
    schema: Schema,
    facts: list[Version],
    epochs: list[Epoch],
) -> None:
    """Input relation ``i``'s events of ``epochs`` (with its ``facts``) in their epochs'
    partitions: one Spark job."""
    if not epochs:
        return
    last, end = epochs[-1].start, epochs[-1].end
    columns = [F.col(f"c{i}_{j}").alias(c) for j, c in enumerate(schema.columns)]
    meta = [F.col("t"), F.col("t").alias("kt"), F.col("exp"), F.lit(0).cast("long").alias("_tau")]
    rows = stored.where((F.col("r") == i) & (F.col("t") < end) & (F.col("epoch") <= last))
    rows = rows.select(*columns, *meta, F.col("epoch").cast("string").alias("epoch"))
    ends = [e.end for e in epochs]
    placed = [
        (*record(fact, schema), epoch_key(epochs[bisect.bisect_right(ends, fact.kt)]))
        for fact in facts
        if fact.kt < end  # as `Driver.key_for` places them: earlier ones in the first epoch
    ]
    if placed:
        struct = struct_of(schema)
        with_epoch = StructType([*struct.fields, StructField("epoch", StringType())])
        rows = rows.unionByName(frames.local(spark, placed, with_epoch))
    wh.write_partitioned(schema.name, rows)
