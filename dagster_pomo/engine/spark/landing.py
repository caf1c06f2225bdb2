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

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from dagster_pomo.engine.ingest import (
    Ingested,
    Landed,
    Quarantined,
    file_signature,
    stored_types,
)
from dagster_pomo.engine.inputs import RunInputs, epoch_range, load_inputs
from dagster_pomo.engine.lines import (
    PIECE_BYTES,
    TimeWindow,
    cut,
)
from dagster_pomo.engine.spark.landing_in_place import TALLY, InPlace, writer
from dagster_pomo.engine.spark.landing_scratch import InScratch, Staged
from dagster_pomo.engine.spark.landing_tasks import (
    BAD,
    BAD_COLUMNS,
    Grid,
    metrics,
    numbered,
    over_tasks,
    reader,
    scratch_schema,
    tasks_of,
    types_of,
)
from dagster_pomo.engine.spark.session import runs_here
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.engine.stored import StoredLanding
from dagster_pomo.engine.versions import (
    Version,
    digest_of,
)
from dagster_pomo.lang import Program
from dagster_pomo.plan.schema import infer_schemas
from dagster_pomo.timeline import Epoch

__all__ = ["Grid", "InPlace", "InScratch", "Staged", "StoredLanding", "read_landing", "staged"]


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
    tasks = tasks_of(pieces, PIECE_BYTES)
    types = types_of(spark, program, tasks, window)
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
            write = writer(program, inputs, types, window, grid, given, files, digests, roots, end)
            at = {piece: i for i, piece in enumerate(pieces)}
            work = [(n, [(at[p], p) for p in task]) for n, task in enumerate(tasks)]
            over_tasks(spark, work, write, TALLY).write.mode("overwrite").parquet(scratch)
            rows = spark.read.schema(from_arrow_schema(TALLY)).parquet(scratch)
            yield InPlace.of(known, len(inputs), rows, roots, pieces)
        else:
            layout = scratch_schema(inputs)
            read = reader(program, inputs, types, window, grid, layout, given, files, digests)
            seen = Observation("landing")
            tasks = tasks_of(numbered(spark, pieces), PIECE_BYTES)
            rows = over_tasks(spark, tasks, read, layout).observe(seen, *metrics(inputs))
            rows.write.mode("overwrite").partitionBy("r").parquet(scratch)
            stored = spark.read.schema(from_arrow_schema(layout)).parquet(scratch)
            bad = stored.where(F.col("r") == BAD).select(*BAD_COLUMNS)
            yield InScratch(*known, seen.get, bad, stored)
    finally:
        wh.delete(scratch)
        for root in roots:
            wh.discard(root)


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

    grid, times = Grid(size, start), window or DEFAULT_TIMES
    with staged(spark, wh, program, paths, grid, times, until) as read:
        ingested = load_inputs(program, Ingested(types=read.types))
        epochs = epoch_range(read.times or ingested.times, size, start, until)
        read.store(epochs.epochs, ingested.events)
        read.held(ingested)
        try:
            yield RunInputs(ingested, read.schemas, epochs)
        finally:
            if ingested.all_quarantined is not None:
                ingested.all_quarantined = _gone


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
