"""What Spark's tasks do with a landing's pieces (see `landing`): which pieces a task
takes, how a task reads, checks and types its lines into rows (`reader`), and the hashes
and counts they return, so that the driver holds no event."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from dagster_pomo.engine.ingest import (
    Deletion,
    Quarantined,
    count_kinds,
    expiry,
    input_types,
    read_piece,
)
from dagster_pomo.engine.lines import (
    PARQUET,
    ROWS_A_BATCH,
    Piece,
    TimeWindow,
    newlines,
)
from dagster_pomo.engine.lines import numbered as numbered_pieces
from dagster_pomo.engine.local.arrow_schemas import ARROW
from dagster_pomo.engine.local.linear_fixpoint import NUMPY_OPS
from dagster_pomo.engine.versions import (
    Version,
    row_hash,
)
from dagster_pomo.lang import Program
from dagster_pomo.plan import time as time_rules
from dagster_pomo.plan.schema import Schema
from dagster_pomo.timeline import Epoch

BAD = -1  # the relation index of a bad line in the rows tasks return


def deleting(i: int) -> int:
    """The relation index, in the rows tasks return, of a delete line of input relation
    ``i`` (``"op": "delete"``; see `ingest.withdraw`): -2, -3, ..."""
    return -2 - i


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
    """When each event stamped at the times ``t`` expires (`plan.time.expiry`, the rule
    every backend applies): never past `NEVER`."""
    return np.asarray(time_rules.expiry(t, lifetime, NUMPY_OPS), dtype=np.int64)


def tasks_of(pieces: Sequence[Piece], size: int) -> list[list[Piece]]:
    """Consecutive pieces grouped into tasks of about ``size`` bytes each: a landing of many
    small files is read by few tasks, a large file by one task a piece."""
    out: list[list[Piece]] = []
    taken = 0
    for piece in pieces:
        here = _bytes(piece)
        if not out or taken + here > size:
            out.append([])
            size = 0
        out[-1].append(piece)
        taken += here
    return out


def _bytes(piece: Piece) -> int:
    """About how many bytes of its file ``piece`` covers (a Parquet piece: all of them)."""
    if piece.file.endswith(PARQUET):
        return Path(piece.file).stat().st_size
    end = Path(piece.file).stat().st_size if piece.end is None else piece.end
    return max(1, end - piece.start)


def over_tasks(
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


def numbered(spark: SparkSession, pieces: list[Piece]) -> list[Piece]:
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

    rows = over_tasks(spark, counted, count, COUNTED).collect()
    return numbered_pieces(pieces, {pieces[r["piece"]]: r["newlines"] for r in rows})


def types_of(
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

        for r in over_tasks(spark, tasks, kinds, KINDS).collect():
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


def scratch_schema(inputs: Sequence[Schema]) -> pa.Schema:
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


def reader(
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
    (`ingest.read_piece`), as rows of ``schema`` (see `scratch_schema`), a batch of one
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
    for i, s in enumerate(inputs):  # a delete line: where it is and the event it names
        names[deleting(i)] = ["epoch", "t", "file", "line", "text"]
        names[deleting(i)] += [f"c{i}_{j}" for j in range(len(s.columns))]

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
                elif isinstance(event, Deletion):
                    r = deleting(index[event.relation])
                    columns = held.get(r) or held.setdefault(r, [[] for _ in names[r]])
                    columns[0].append(grid.key(event.t))
                    columns[1].append(event.t)
                    columns[2].append(given.get(event.file, event.file))
                    columns[3].append(event.line)
                    columns[4].append(event.text)
                    for j, value in enumerate(event.values, start=5):
                        columns[j].append(value)
                else:
                    rel, values, t, _ = event
                    r = index[rel.name]
                    columns = held.get(r) or held.setdefault(r, [[] for _ in names[r]])
                    exp = expiry(t, lifetimes[r])
                    columns[0].append(grid.key(t))
                    columns[1].append(t)
                    columns[2].append(exp)
                    columns[3].append(event_hash(t, values, exp) if digests else None)
                    for j, value in enumerate(values, start=4):
                        columns[j].append(value)
                if len(columns[0]) >= ROWS_A_BATCH:
                    yield batch(r, f, held.pop(r))
            for r, columns in held.items():
                yield batch(r, f, columns)

    return read


def event_hash(t: int, values: tuple[Any, ...], exp: int) -> int:
    """An input event's 64-bit hash as `versions.digest` takes it (``kt`` is ``t``, no
    aggregates, ``tau`` 0), signed to fit a long: sums agree modulo 2^64."""
    return signed(row_hash(Version(t, values, t, exp)))


def signed(digest: bytes) -> int:
    """A `versions.row_hash` as a signed 64-bit integer (a Spark long)."""
    h = int.from_bytes(digest, "big")
    return h - (1 << 64) if h >= 1 << 63 else h


def hashes(table: pa.Table, arity: int) -> int:
    """The sum of `event_hash` over the stored input events of ``table``."""
    values = [table.column(i).to_pylist() for i in range(arity)]
    times, exps = table.column("t").to_pylist(), table.column("exp").to_pylist()
    rows = zip(*values, strict=True) if values else ((),) * len(times)
    return sum(event_hash(t, tuple(v), exp) for t, v, exp in zip(times, rows, exps, strict=True))


def metrics(inputs: Sequence[Schema]) -> list[Any]:
    """The counts of the rows tasks return: lines, bad lines, the first and last time of an
    event, and per input relation its events (``n<i>``) and delete lines (``d<i>``)."""
    accepted = F.col("r") >= 0
    return [
        F.count(F.lit(1)).alias("lines"),
        F.count_if(F.col("r") == BAD).alias("bad"),
        F.min(F.when(accepted, F.col("t"))).alias("first"),
        F.max(F.when(accepted, F.col("t"))).alias("last"),
        *(F.count_if(F.col("r") == i).alias(f"n{i}") for i in range(len(inputs))),
        *(F.count_if(F.col("r") == deleting(i)).alias(f"d{i}") for i in range(len(inputs))),
    ]


def facts_by_epoch(
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


def facts_hash(by_epoch: Mapping[int, list[Version]]) -> int:
    """The sum of the facts' `versions.row_hash` values (they are hashed here)."""
    return sum(int.from_bytes(row_hash(f), "big") for facts in by_epoch.values() for f in facts)
