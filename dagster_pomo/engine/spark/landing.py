"""A large landing read by Spark's tasks: ingestion that grows with the cluster.

The landing is cut in pieces (`lines.cut`: byte ranges of JSON Lines files, row groups of
Parquet ones) and tasks read them with this process's reader, checks and types
(`ingest.read_piece`), so each line is accepted or quarantined, for the same reason, as
`ingest.ingest_files` would. Where the tasks see the warehouse's disk, one Spark job
reads the landing and writes each event into its epoch's files (`InPlace`), its tasks
numbering lines from their pieces' starts and telling the driver each piece's newlines,
which it adds to the bad lines' numbers; a task reads a piece with Arrow's JSON reader in
one call where that reads it as the checks would (`arrow_lines`), else line by line.
Elsewhere (a cluster, Spark Connect), one job writes what the tasks read to a scratch
folder of the warehouse (each input relation's events, and the bad lines), counting as it
writes, then one job per input relation stores its events in their epochs' partitions;
before them, a job counts the newlines of the pieces of large JSON Lines files (so line
numbers are the file's). Only where needed, a job counts the kinds of values of columns
whose types the data decides. This process holds no event: counts, the first and last
time, the first bad lines; the others are read back in order, streamed, when the
quarantine is written.
"""

from __future__ import annotations

import bisect
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import DecimalType, LongType, StringType, StructField, StructType

from dagster_pomo.engine.arrow_lines import Layout, read_piece_arrow
from dagster_pomo.engine.ingest import (
    Ingested,
    Landed,
    Quarantined,
    count_kinds,
    expiry,
    file_signature,
    input_types,
    read_piece,
    stored_types,
)
from dagster_pomo.engine.inputs import RunInputs, epoch_range, load_inputs
from dagster_pomo.engine.lines import (
    PARQUET,
    PIECE_BYTES,
    ROWS_A_BATCH,
    Piece,
    TimeWindow,
    cut,
    newlines,
)
from dagster_pomo.engine.lines import numbered as numbered_pieces
from dagster_pomo.engine.local.arrow_schemas import ARROW, arrow_schema
from dagster_pomo.engine.spark import frames
from dagster_pomo.engine.spark.session import runs_here
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.engine.versions import (
    Version,
    digest_of,
    first_of_each_event,
    record,
    row_hash,
)
from dagster_pomo.lang import Program
from dagster_pomo.plan.schema import Schema, infer_schemas
from dagster_pomo.timeline import NEVER, Epoch

BAD = -1  # the relation index of a bad line in the scratch folder
HELD = 1_000  # bad lines this process holds (to show); the quarantine file gets them all


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

    def keys(self, t: np.ndarray) -> np.ndarray:
        """`key` of each of the times ``t``."""
        anchor = self.start or 0
        keys = anchor + (t - anchor) // self.size * self.size
        return keys if self.start is None else np.maximum(keys, self.start)


def expiries(t: np.ndarray, lifetime: int | None) -> np.ndarray:
    """`ingest.expiry` of each of the times ``t``: never past `NEVER`."""
    if lifetime is None:
        return np.full(len(t), NEVER, np.int64)
    with np.errstate(over="ignore"):  # where it wraps, `NEVER` is taken
        return np.where(t > NEVER - lifetime, NEVER, t + lifetime)


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


# A bad line's fields (as `Quarantined` has them), in the rows tasks return.
BAD_LINE = [
    pa.field("file", pa.string()),
    pa.field("line", pa.int64()),
    pa.field("reason", pa.string()),
    pa.field("text", pa.string()),
]
BAD_COLUMNS = [field.name for field in BAD_LINE]


def _scratch_schema(inputs: Sequence[Schema]) -> pa.Schema:
    """The scratch folder's rows: a relation's index (``r``, `BAD` for a bad line), the
    file's (``f``), the event's hash (``h``, see `staged`), epoch, time and expiry, each
    input relation's columns, a bad line's fields."""
    fields = [
        pa.field("r", pa.int32()),
        pa.field("f", pa.int32()),
        pa.field("h", pa.int64()),
        pa.field("epoch", pa.int64()),
        pa.field("t", pa.int64()),
        pa.field("exp", pa.int64()),
    ]
    for i, schema in enumerate(inputs):
        fields += [pa.field(f"c{i}_{j}", ARROW[typ]) for j, typ in enumerate(schema.types)]
    return pa.schema([*fields, *BAD_LINE])


def _reader(
    program: Program,
    inputs: Sequence[Schema],
    types: Mapping[str, tuple[str, ...]],
    window: TimeWindow,
    grid: Grid,
    schema: pa.Schema,
    given: Mapping[str, str],
    files: Sequence[str],
    digests: bool,
) -> Callable[[list[Piece]], Iterator[pa.RecordBatch]]:
    """What a task does with its pieces: each line read, checked and typed
    (`ingest.read_piece`), as rows of ``schema`` (see `_scratch_schema`), a batch of one
    relation (or of bad lines) of one file at a time; a bad line's file named as
    ``given``, each row's file by its index in ``files``; with ``digests``, each event's
    hash as `versions.digest` takes it."""
    index = {s.name: i for i, s in enumerate(inputs)}
    numbers = {file: f for f, file in enumerate(files)}
    lifetimes = [program.catalog[s.name].lifetime for s in inputs]
    names = {
        i: ["epoch", "t", "exp", "h", *(f"c{i}_{j}" for j in range(len(s.columns)))]
        for i, s in enumerate(inputs)
    }
    names[BAD] = ["file", "line", "reason", "text"]

    def batch(r: int, f: int, columns: list[list[Any]]) -> pa.RecordBatch:
        n = len(columns[0])
        given_columns = dict(zip(names[r], columns, strict=True))
        if not digests:
            given_columns.pop("h", None)
        constant = {"r": r, "f": f}
        arrays = [
            pa.array(given_columns[field.name], field.type)
            if field.name in given_columns
            else pa.array([constant[field.name]] * n, field.type)
            if field.name in constant
            else pa.nulls(n, field.type)
            for field in schema
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def read(pieces: list[Piece]) -> Iterator[pa.RecordBatch]:
        for piece in pieces:
            f = numbers[piece.file]
            held: dict[int, list[list[Any]]] = {}
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
                    exp = expiry(t, lifetimes[r])
                    columns[0].append(grid.key(t))
                    columns[1].append(t)
                    columns[2].append(exp)
                    columns[3].append(_hash(t, values, exp) if digests else None)
                    for j, value in enumerate(values, start=4):
                        columns[j].append(value)
                if len(columns[0]) >= ROWS_A_BATCH:
                    yield batch(r, f, held.pop(r))
            for r, columns in held.items():
                yield batch(r, f, columns)

    return read


def _hash(t: int, values: tuple[Any, ...], exp: int) -> int:
    """An input event's 64-bit hash as `versions.digest` takes it (``kt`` is ``t``, no
    aggregates, ``tau`` 0), signed to fit a long: sums agree modulo 2^64."""
    return _signed(row_hash(Version(t, values, t, exp)))


def _signed(digest: bytes) -> int:
    """A `versions.row_hash` as a signed 64-bit integer (a Spark long)."""
    h = int.from_bytes(digest, "big")
    return h - (1 << 64) if h >= 1 << 63 else h


def _hashes(table: pa.Table, arity: int) -> int:
    """The sum of `_hash` over the stored input events of ``table``."""
    values = [table.column(i).to_pylist() for i in range(arity)]
    times, exps = table.column("t").to_pylist(), table.column("exp").to_pylist()
    rows = zip(*values, strict=True) if values else ((),) * len(times)
    return sum(_hash(t, tuple(v), exp) for t, v, exp in zip(times, rows, exps, strict=True))


def _metrics(inputs: Sequence[Schema]) -> list[Any]:
    accepted = F.col("r") >= 0
    return [
        F.count(F.lit(1)).alias("lines"),
        F.count_if(F.col("r") == BAD).alias("bad"),
        F.min(F.when(accepted, F.col("t"))).alias("first"),
        F.max(F.when(accepted, F.col("t"))).alias("last"),
        *(F.count_if(F.col("r") == i).alias(f"n{i}") for i in range(len(inputs))),
    ]


def _facts_by_epoch(
    facts: list[Version], epochs: list[Epoch], first_of_all: bool
) -> dict[int, list[Version]]:
    """The corpus's ``facts`` of a relation that ``epochs`` (consecutive) store, by the start
    of each one's epoch: none from ``epochs``' end on, and earlier ones in the first only
    when ``epochs`` start the run (``first_of_all``, as `Driver.key_for` places them)."""
    first, end = epochs[0].start, epochs[-1].end
    ends = [e.end for e in epochs]
    out: dict[int, list[Version]] = {}
    for fact in facts:
        if fact.kt < end and (first_of_all or fact.kt >= first):
            out.setdefault(epochs[bisect.bisect_right(ends, fact.kt)].start, []).append(fact)
    return out


def _facts_hash(by_epoch: Mapping[int, list[Version]]) -> int:
    """The sum of the facts' `versions.row_hash` values (they are hashed here)."""
    return sum(int.from_bytes(row_hash(f), "big") for facts in by_epoch.values() for f in facts)


def _gone() -> Iterator[Quarantined]:
    raise RuntimeError("the bad lines were kept in the run's scratch folder, removed at its end")


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
    got: dict[str, Any]  # the counts (see `_metrics`)
    bad_lines: DataFrame  # file, line, reason, text of each bad line

    @property
    def lines(self) -> int:
        return int(self.got["lines"])

    @property
    def bad(self) -> int:
        return int(self.got["bad"])

    @property
    def span(self) -> list[int]:
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
        ingested.accepted_by_spark = self.lines - self.bad - ingested.repeats
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
    line, see `_scratch_schema`); each relation's events then stored by Spark's writer."""

    rows: DataFrame  # the scratch folder's rows

    def store(
        self, epochs: list[Epoch], facts: Mapping[str, list[Version]], first_of_all: bool = True
    ) -> dict[str, tuple[int, int]]:
        """One Spark job a relation that has any events to store."""
        out: dict[str, tuple[int, int]] = {}
        for i, schema in enumerate(self.inputs):
            mine = facts.get(schema.name, [])
            if epochs and (self.got[f"n{i}"] or mine):
                out[schema.name] = self._store(i, schema, mine, epochs, first_of_all)
        return out

    def _store(
        self, i: int, schema: Schema, facts: list[Version], epochs: list[Epoch], earlier: bool
    ) -> tuple[int, int]:
        first, last, end = epochs[0].start, epochs[-1].start, epochs[-1].end
        columns = [F.col(f"c{i}_{j}").alias(c) for j, c in enumerate(schema.columns)]
        kt, tau = F.col("t").alias("kt"), F.lit(0).cast("long").alias("_tau")
        chosen = (F.col("t") < end) & F.col("epoch").between(first, last)
        rows = self.rows.where((F.col("r") == i) & chosen)
        rows = rows.select(*columns, "t", kt, "exp", tau, F.col("epoch").cast("string"), "h")
        placed = _facts_by_epoch(facts, epochs, earlier)
        if placed:
            struct = from_arrow_schema(arrow_schema(schema))  # the stored columns
            with_epoch = StructType(
                [*struct.fields, StructField("epoch", StringType()), StructField("h", LongType())]
            )
            records = [
                (*record(f, schema), str(key), _signed(row_hash(f)))
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
        rows = rows.observe(counted, F.count(F.lit(1)).alias("n"), summed.alias("h"))
        self.wh.write_partitioned(schema.name, rows.drop("h"))
        n = int(counted.get["n"])
        self.got["repeats"] = self.got.get("repeats", 0) + int(given.get["n"]) - n
        return n, int(counted.get["h"] or 0)

    def per_file(self) -> dict[str, tuple[int, int | None, int | None]]:
        """One Spark job."""
        accepted = F.col("r") >= 0
        by_file = self.rows.groupBy("f").agg(
            F.count(F.lit(1)).alias("lines"),
            F.min(F.when(accepted, F.col("t"))).alias("first"),
            F.max(F.when(accepted, F.col("t"))).alias("last"),
        )
        got = {r["f"]: (r["lines"], r["first"], r["last"]) for r in by_file.collect()}
        return {file: got.get(f, (0, None, None)) for f, file in enumerate(self.files)}


# What a task writing the landing's events in place returns (see `_writer`): each bad line
# (`LINE`, numbered from its piece's start), and per file and relation (`BAD` for the bad
# lines) how many lines it read and the first and last time of the accepted ones (`READ`),
# per relation and epoch (the task's number in ``f``) how many events it wrote, each once,
# the sum of their hashes, their first and last time and how many repeats it left out
# (`WROTE`), and per piece of a JSON Lines file that another follows, its newlines
# (`NEWLINES`: where the next piece's lines begin).
LINE, READ, WROTE, NEWLINES = 0, 1, 2, 3
TALLY = pa.schema(
    [
        pa.field("kind", pa.int8()),
        pa.field("f", pa.int32()),
        pa.field("piece", pa.int32()),
        pa.field("r", pa.int32()),
        pa.field("epoch", pa.int64()),
        pa.field("n", pa.int64()),
        pa.field("h", pa.decimal128(38, 0)),
        pa.field("first", pa.int64()),
        pa.field("last", pa.int64()),
        pa.field("repeats", pa.int64()),
        *BAD_LINE,
    ]
)


def _writer(
    program: Program,
    inputs: Sequence[Schema],
    types: Mapping[str, tuple[str, ...]],
    window: TimeWindow,
    grid: Grid,
    given: Mapping[str, str],
    files: Sequence[str],
    digests: bool,
    roots: Sequence[str],
    end: int | None,
    arrow_reads: bool = True,
) -> Callable[[tuple[int, list[tuple[int, Piece]]]], Iterator[pa.RecordBatch]]:
    """What a task does with its pieces (each with its index among the landing's) when it
    sees the warehouse's disk: each line read, checked and typed (`ingest.read_piece`);
    each accepted event of a time before ``end`` written, as the warehouse stores it, to
    ``<roots[r]>/<epoch>/part-<task>.parquet`` (a task's events of one relation and epoch
    in one file, in the order of its lines); the rows of `TALLY` returned. Lines are
    numbered from each piece's start (`NEWLINES` rows tell the driver where each begins:
    no job counts them first). A task run again writes the same files over."""
    index = {s.name: i for i, s in enumerate(inputs)}
    numbers = {file: f for f, file in enumerate(files)}
    lifetimes = [program.catalog[s.name].lifetime for s in inputs]
    layouts = [arrow_schema(s) for s in inputs]
    names = [s.name for s in inputs]
    arrow = (names, {s.name: s.columns for s in inputs}, types) if arrow_reads else None

    def write(task: tuple[int, list[tuple[int, Piece]]]) -> Iterator[pa.RecordBatch]:
        number, pieces = task
        held: dict[int, tuple[list[list[Any]], list[int]]] = {}  # by relation: columns, times
        parts: dict[tuple[int, int], list[pa.Table]] = {}  # by relation and epoch
        read: dict[tuple[int, int], list[Any]] = {}  # by file and relation: lines, first, last
        rows: list[dict[str, Any]] = []

        def place(f: int, r: int, columns: Sequence[Any], t: np.ndarray) -> None:
            """Events of relation ``r`` read from file ``f`` (their columns, as Arrow, and
            times) tallied and held, an epoch's at a time, in the order of their lines."""
            seen = read.setdefault((f, r), [0, None, None])
            seen[0] += len(t)
            least, most = int(t.min()), int(t.max())
            seen[1] = least if seen[1] is None else min(seen[1], least)
            seen[2] = most if seen[2] is None else max(seen[2], most)
            kept = np.arange(len(t)) if end is None else np.flatnonzero(t < end)
            keys = grid.keys(t[kept])
            order = kept[np.argsort(keys, kind="stable")]  # by epoch, then line
            keys = np.sort(keys, kind="stable")
            exps, tau = expiries(t, lifetimes[r]), np.zeros(len(t), np.int64)
            arrays = [*columns, pa.array(t), pa.array(t), pa.array(exps), pa.array(tau)]
            table = pa.Table.from_arrays(arrays, schema=layouts[r]).take(pa.array(order))
            starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else []
            bounds = [*map(int, starts), len(keys)]
            for at, upto in zip(bounds, bounds[1:], strict=False):
                parts.setdefault((r, int(keys[at])), []).append(table.slice(at, upto - at))

        def written() -> Iterator[dict[str, Any]]:
            """Each relation's events of each epoch this task read written to its file, each
            event once (`versions.first_of_each_event`); the `WROTE` row of each, with the
            first and last time written, so that the driver can tell which epochs other
            tasks wrote the same times to."""
            for (r, key), tables in sorted(parts.items()):
                arity = len(layouts[r]) - 4  # the arguments, then t, kt, exp, _tau
                whole = pa.concat_tables(tables)
                table = first_of_each_event(whole, arity)
                folder = os.path.join(roots[r], str(key))
                os.makedirs(folder, exist_ok=True)
                name = os.path.join(folder, f"part-{number:05d}.parquet")
                pq.write_table(table, name, row_group_size=ROWS_A_BATCH)
                times = table.column("t")
                yield {
                    "kind": WROTE,
                    "f": number,
                    "r": r,
                    "epoch": key,
                    "n": table.num_rows,
                    "h": _hashes(table, arity) if digests else None,
                    "first": pc.min(times).as_py(),
                    "last": pc.max(times).as_py(),
                    "repeats": whole.num_rows - table.num_rows,
                }
            parts.clear()

        def flush(f: int) -> None:
            """The events held, read line by line from file ``f``, placed (see `place`)."""
            for r, (values, times) in held.items():
                columns = [pa.array(c, x.type) for c, x in zip(values, layouts[r], strict=False)]
                place(f, r, columns, np.array(times, dtype=np.int64))
            held.clear()

        # Arrow reads a piece at once where it reads it as the checks would (`arrow_lines`).
        layout = Layout.of(*arrow) if arrow is not None else None
        for at, piece in pieces:
            f = numbers[piece.file]
            if piece.end is not None and not piece.file.endswith(PARQUET):
                n = newlines(Path(piece.file), piece.start, piece.end)
                rows.append({"kind": NEWLINES, "f": f, "piece": at, "n": n})
            quick = None
            if layout is not None and not piece.file.endswith(PARQUET):
                quick = read_piece_arrow(layout, piece, window)
            if quick is not None:
                for r, (columns, t) in quick.items():
                    place(f, r, columns, t)
                continue
            size = 0
            for event in read_piece(program, piece, types, window):
                if isinstance(event, Quarantined):
                    shown = given.get(event.file, event.file)
                    line = {"file": shown, "line": event.line, "reason": event.reason}
                    rows.append({**line, "kind": LINE, "f": f, "piece": at, "r": BAD})
                    rows[-1]["text"] = event.text
                    (read.get((f, BAD)) or read.setdefault((f, BAD), [0, None, None]))[0] += 1
                    if len(rows) >= ROWS_A_BATCH:
                        yield pa.RecordBatch.from_pylist(rows, schema=TALLY)
                        rows = []
                    continue
                rel, values, t, _ = event
                r = index[rel.name]
                columns = held.get(r)
                if columns is None:
                    columns = held[r] = ([[] for _ in values], [])
                for column, value in zip(columns[0], values, strict=True):
                    column.append(value)
                columns[1].append(t)
                size += 1
                if size >= ROWS_A_BATCH:  # held as Arrow columns, not Python values
                    flush(f)
                    size = 0
            flush(f)
        rows += [
            {"kind": READ, "f": f, "r": r, "n": n, "first": a, "last": b}
            for (f, r), (n, a, b) in read.items()
        ]
        rows += written()
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=TALLY)

    return write


@dataclass(frozen=True)
class Written:
    """One file of an epoch's events: how many, the sum of their hashes, the first and last
    time (two files whose times overlap may hold one event twice)."""

    n: int
    h: int
    first: int
    last: int


def _overlap(files: Sequence[Written]) -> bool:
    """Whether two of ``files`` hold a time in common."""
    last = None
    for f in sorted(files, key=lambda f: f.first):
        if last is not None and f.first <= last:
            return True
        last = f.last if last is None else max(last, f.last)
    return False


@dataclass
class InPlace(Staged):
    """The landing's events written by Spark's tasks in each input relation's epochs'
    files, in folders beside the warehouse's (`Warehouse.staging`); each epoch then moved
    into place (`Warehouse.promote`). Only where the tasks see the warehouse's disk."""

    roots: list[str]  # each input relation's folder of epochs written
    wrote: dict[tuple[int, int], list[Written]]  # by relation and epoch: each task's file
    read: dict[int, tuple[int, int | None, int | None]]  # by file: lines, first, last

    @classmethod
    def of(
        cls,
        known: tuple[Any, ...],
        relations: int,
        rows: DataFrame,
        roots: list[str],
        pieces: Sequence[Piece],
    ) -> InPlace:
        """What the tasks wrote to ``roots`` (one per input relation, ``relations`` of
        them) reading ``pieces``, from their tallies (one small Spark job); ``known``:
        `Staged`'s fields up to ``got``. A bad line's number is its file's: its piece's
        number plus the newlines of the pieces of its file before it."""
        wrote: dict[tuple[int, int], list[Written]] = {}
        read: dict[int, list[Any]] = {}
        got: dict[str, Any] = {"lines": 0, "bad": 0, "first": None, "last": None, "repeats": 0}
        got.update({f"n{i}": 0 for i in range(relations)})
        counts: dict[Piece, int] = {}
        for row in rows.where(F.col("kind") != LINE).collect():
            r, n = row["r"], row["n"]
            if row["kind"] == NEWLINES:
                counts[pieces[row["piece"]]] = n
                continue
            if row["kind"] == WROTE:
                file = Written(n, int(row["h"] or 0), row["first"], row["last"])
                wrote.setdefault((r, row["epoch"]), []).append(file)
                got["repeats"] += row["repeats"]
                continue
            per = read.setdefault(row["f"], [0, None, None])
            per[0] += n
            got["lines"] += n
            if r == BAD:
                got["bad"] += n
                continue
            got[f"n{r}"] += n
            first, last = row["first"], row["last"]
            per[1] = first if per[1] is None else min(per[1], first)
            per[2] = last if per[2] is None else max(per[2], last)
            got["first"] = first if got["first"] is None else min(got["first"], first)
            got["last"] = last if got["last"] is None else max(got["last"], last)
        # A Parquet piece's rows are numbered from its file's start already (`cut`).
        numbered = numbered_pieces(list(pieces), counts)
        before = [0 if p.file.endswith(PARQUET) else p.before for p in numbered]
        offsets = [x for at, n in enumerate(before) if n for x in (F.lit(at), F.lit(n))]
        bad = rows.where(F.col("kind") == LINE)
        if offsets:
            offset = F.coalesce(F.create_map(*offsets)[F.col("piece")], F.lit(0))
            bad = bad.withColumn("line", F.col("line") + offset)
        bad = bad.select(*BAD_COLUMNS)
        per_file = {f: (v[0], v[1], v[2]) for f, v in read.items()}
        return cls(*known, got, bad, roots, wrote, per_file)

    def store(
        self, epochs: list[Epoch], facts: Mapping[str, list[Version]], first_of_all: bool = True
    ) -> dict[str, tuple[int, int]]:
        """No Spark job: each epoch's folder moved in, the facts' file written first. Each
        task wrote each event once; where two files of an epoch (the tasks', the facts')
        hold times in common, the epoch is read and written again with each event once
        (`_one_each`): a landing sorted by time has none such."""
        out: dict[str, tuple[int, int]] = {}
        if not epochs:
            return out
        starts = {e.start for e in epochs}
        for i, schema in enumerate(self.inputs):
            mine = facts.get(schema.name, [])  # each once (`ingest.corpus_facts`)
            if not (self.got[f"n{i}"] or mine):
                continue
            placed = _facts_by_epoch(mine, epochs, first_of_all)
            struct = from_arrow_schema(arrow_schema(schema))  # the stored columns
            n, total = 0, 0
            keys = {key for (r, key) in self.wrote if r == i and key in starts}
            for key in sorted(keys | set(placed)):
                folder = os.path.join(self.roots[i], str(key))
                files = list(self.wrote.get((i, key), []))
                if key in placed:
                    versions = placed[key]
                    os.makedirs(folder, exist_ok=True)
                    table = frames.arrow_table([record(v, schema) for v in versions], struct)
                    pq.write_table(table, os.path.join(folder, "part-facts.parquet"))
                    times = [v.t for v in versions]
                    h = _facts_hash({key: versions})
                    files.append(Written(len(versions), h, min(times), max(times)))
                if _overlap(files):
                    got = self._one_each(folder, len(schema.columns))
                else:
                    got = (sum(f.n for f in files), sum(f.h for f in files))
                n, total = n + got[0], total + got[1]
                self.wh.promote(folder, schema.name, str(key))
            out[schema.name] = (n, total)
        return out

    def _one_each(self, folder: str, arity: int) -> tuple[int, int]:
        """The epoch's files in ``folder`` made one, each event once (the facts' first, then
        the tasks' in their order); how many events it holds and the sum of their hashes."""
        names = sorted(os.listdir(folder), key=lambda name: (name != "part-facts.parquet", name))
        whole = pa.concat_tables([pq.read_table(os.path.join(folder, x)) for x in names])
        table = first_of_each_event(whole, arity)
        self.got["repeats"] += whole.num_rows - table.num_rows
        pq.write_table(table, os.path.join(folder, "part-one.parquet"), row_group_size=ROWS_A_BATCH)
        for name in names:
            os.remove(os.path.join(folder, name))
        return table.num_rows, _hashes(table, arity)

    def per_file(self) -> dict[str, tuple[int, int | None, int | None]]:
        """No Spark job."""
        return {file: self.read.get(f, (0, None, None)) for f, file in enumerate(self.files)}


@contextmanager
def staged(
    spark: SparkSession,
    wh: Warehouse,
    program: Program,
    paths: Sequence[Path],
    grid: Grid,
    window: TimeWindow,
    end: int | None,
    digests: bool = False,
) -> Iterator[Staged]:
    """The landing ``paths`` read by Spark's tasks (one job, and before it, where needed, one
    counting kinds of values and, into a scratch folder, one counting newlines), each
    event placed on ``grid``;
    what the tasks wrote is removed when the block ends. Where the tasks see the
    warehouse's disk, they write each input relation's events of times before ``end``
    (all, without one) in its epochs' files themselves (`InPlace`); elsewhere into a
    scratch folder of the warehouse (`InScratch`). With ``digests``, each row's hash as
    `versions.digest` takes it, so that `Staged.store` gives digests."""
    # Tasks open files by their full path (they run in folders of their own); the
    # quarantine names each as it was given.
    given = {str(p.absolute()): str(p) for p in paths}
    pieces = [p for path in given for p in cut(Path(path), PIECE_BYTES)]
    tasks = _tasks(pieces)
    types = _types(spark, program, tasks, window)
    stored_as = stored_types(types)
    schemas = infer_schemas(program, stored_as)
    inputs = [schemas[rel.name] for rel in program.catalog.inputs]
    files = list(given)
    shown = [given[f] for f in files]
    known = (spark, wh, program, stored_as, schemas, inputs, shown)
    # Tasks write in place only relations of the warehouse's stored columns alone.
    here = runs_here(spark) and all(not s.aggregates and not s.provenance for s in inputs)
    roots = [root for s in inputs if here and (root := wh.staging(s.name))]
    scratch = wh.scratch("landing")
    try:
        if inputs and len(roots) == len(inputs):
            write = _writer(program, inputs, types, window, grid, given, files, digests, roots, end)
            at = {piece: i for i, piece in enumerate(pieces)}
            work = [(n, [(at[p], p) for p in task]) for n, task in enumerate(tasks)]
            _over_tasks(spark, work, write, TALLY).write.mode("overwrite").parquet(scratch)
            rows = spark.read.schema(from_arrow_schema(TALLY)).parquet(scratch)
            yield InPlace.of(known, len(inputs), rows, roots, pieces)
        else:
            layout = _scratch_schema(inputs)
            read = _reader(program, inputs, types, window, grid, layout, given, files, digests)
            seen = Observation("landing")
            tasks = _tasks(_numbered(spark, pieces))
            rows = _over_tasks(spark, tasks, read, layout).observe(seen, *_metrics(inputs))
            rows.write.mode("overwrite").partitionBy("r").parquet(scratch)
            stored = spark.read.schema(from_arrow_schema(layout)).parquet(scratch)
            bad = stored.where(F.col("r") == BAD).select(*BAD_COLUMNS)
            yield InScratch(*known, seen.get, bad, stored)
    finally:
        wh.delete(scratch)
        for root in roots:
            wh.discard(root)


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

    grid, times = Grid(size, start), window or DEFAULT_TIMES
    with staged(spark, wh, program, paths, grid, times, until) as read:
        ingested = load_inputs(program, Ingested(types=read.types))
        epochs = epoch_range(read.span or ingested.times, size, start, until)
        read.store(epochs.epochs, ingested.events)
        read.held(ingested)
        try:
            yield RunInputs(ingested, read.schemas, epochs)
        finally:
            if ingested.all_quarantined is not None:
                ingested.all_quarantined = _gone


@dataclass
class StoredLanding:
    """What the inputs step of a pipeline read with Spark's tasks (see `store_landing`)."""

    ingested: Ingested  # counts, every bad line, what each file held (`Landed`)
    digests: dict[str, str]  # by input relation: the `versions.digest` of what was stored
    counts: dict[str, int]  # ... and how many events


def store_landing(
    spark: SparkSession,
    wh: Warehouse,
    program: Program,
    paths: Sequence[Path],
    grid: Grid,
    epochs: list[Epoch],
    window: TimeWindow,
    facts: Mapping[str, list[Version]],
    first_of_all: bool,
) -> StoredLanding:
    """The files ``paths`` read by Spark's tasks and the input relations' events of
    ``epochs`` stored (see `Staged.store`), with what a pipeline's landing index keeps of
    each file: its signature (taken before reading), lines, first and last time, bad
    lines."""
    signatures = {str(p): file_signature(p) for p in paths}
    end = epochs[-1].end if epochs else None
    with staged(spark, wh, program, paths, grid, window, end, digests=True) as read:
        ingested = Ingested(types=read.types)
        found = read.store(epochs, facts, first_of_all)
        read.held(ingested, limit=None)
        by_file: dict[str, list[Quarantined]] = {}
        for q in ingested.quarantined:
            by_file.setdefault(q.file, []).append(q)
        for file, (lines, first, last) in read.per_file().items():
            bad = tuple(by_file.get(file, ()))
            ingested.landed[file] = Landed(signatures[file], lines, first, last, bad)
    stored = {s.name: found.get(s.name, (0, 0)) for s in read.inputs}
    digests = {name: digest_of(n, total) for name, (n, total) in stored.items()}
    counts = {name: n for name, (n, _) in stored.items()}
    return StoredLanding(ingested, digests, counts)
