"""A landing whose events Spark's tasks wrote in their epochs' files themselves, where
the tasks see the warehouse's disk (see `landing.staged`): what a task writes (`writer`)
and what the driver makes of its tallies (`InPlace`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from dagster_pomo.engine.arrow_lines import Layout, read_piece_arrow
from dagster_pomo.engine.ingest import (
    NOTHING_TO_DELETE,
    Deletion,
    Quarantined,
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
from dagster_pomo.engine.local.arrow_schemas import arrow_schema
from dagster_pomo.engine.spark import frames
from dagster_pomo.engine.spark.landing_scratch import Staged
from dagster_pomo.engine.spark.landing_tasks import (
    BAD,
    BAD_COLUMNS,
    BAD_LINE,
    Grid,
    deleting,
    expiries,
    facts_by_epoch,
    facts_hash,
    hashes,
)
from dagster_pomo.engine.versions import (
    Version,
    first_of_each_event,
    record,
)
from dagster_pomo.lang import Program
from dagster_pomo.plan.schema import Schema
from dagster_pomo.timeline import Epoch

# What a task writing the landing's events in place returns (see `writer`): each bad line
# (`LINE`, numbered from its piece's start), and per file and relation (`BAD` for the bad
# lines) how many lines it read and the first and last time of the accepted ones (`READ`),
# per relation and epoch (the task's number in ``f``) how many events it wrote, each once,
# the sum of their hashes, their first and last time and how many repeats it left out
# (`WROTE`), and per piece of a JSON Lines file that another follows, its newlines
# (`NEWLINES`: where the next piece's lines begin), and each delete line (`DELETE`: the
# relation, its epoch, time in ``first``, the event's values as JSON, where it is; tallied
# in `READ` under `landing_tasks.deleting`).
LINE, READ, WROTE, NEWLINES, DELETE = 0, 1, 2, 3, 4
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
        pa.field("values", pa.string()),
    ]
)


def writer(
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
                    "h": hashes(table, arity) if digests else None,
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
                if isinstance(event, Deletion):
                    r = deleting(index[event.relation])
                    seen = read.setdefault((f, r), [0, None, None])
                    seen[0] += 1
                    seen[1] = event.t if seen[1] is None else min(seen[1], event.t)
                    seen[2] = event.t if seen[2] is None else max(seen[2], event.t)
                    rows.append(
                        {
                            "kind": DELETE,
                            "f": f,
                            "piece": at,
                            "r": index[event.relation],
                            "epoch": grid.key(event.t),
                            "first": event.t,
                            "file": given.get(event.file, event.file),
                            "line": event.line,
                            "text": event.text,
                            "values": json.dumps(list(event.values)),
                        }
                    )
                    continue
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
    # By relation and epoch: the delete lines, in order of file and line (`DELETE`).
    deletions: dict[tuple[int, int], list[Deletion]]

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
        got.update({f"d{i}": 0 for i in range(relations)})
        counts: dict[Piece, int] = {}
        deleted: list[Any] = []
        for row in rows.where(F.col("kind") != LINE).collect():
            r, n = row["r"], row["n"]
            if row["kind"] == NEWLINES:
                counts[pieces[row["piece"]]] = n
                continue
            if row["kind"] == DELETE:
                deleted.append(row)
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
            first, last = row["first"], row["last"]
            per[1] = first if per[1] is None else min(per[1], first)
            per[2] = last if per[2] is None else max(per[2], last)
            if r < BAD:  # delete lines: their file holds those times, no event
                got[f"d{deleting(r)}"] += n
                continue
            got[f"n{r}"] += n
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
        deletions: dict[tuple[int, int], list[Deletion]] = {}
        for row in sorted(deleted, key=lambda row: (row["f"], before[row["piece"]] + row["line"])):
            line = before[row["piece"]] + row["line"]
            values = tuple(json.loads(row["values"]))
            name = known[5][row["r"]].name  # `Staged.inputs`
            gone = Deletion(row["file"], line, row["text"], name, values, row["first"])
            deletions.setdefault((row["r"], row["epoch"]), []).append(gone)
        return cls(*known, got, bad, roots, wrote, per_file, deletions)

    def store(
        self, epochs: list[Epoch], facts: Mapping[str, list[Version]], first_of_all: bool = True
    ) -> dict[str, tuple[int, int]]:
        """No Spark job: each epoch's folder moved in, the facts' file written first. Each
        task wrote each event once; where two files of an epoch (the tasks', the facts')
        hold times in common, the epoch is read and written again with each event once
        (`_one_each`): a landing sorted by time has none such."""
        out: dict[str, tuple[int, int]] = {}
        self._withdraw()
        if not epochs:
            return out
        starts = {e.start for e in epochs}
        for i, schema in enumerate(self.inputs):
            mine = facts.get(schema.name, [])  # each once (`ingest.corpus_facts`)
            if not (self.got[f"n{i}"] or mine):
                continue
            placed = facts_by_epoch(mine, epochs, first_of_all)
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
                    h = facts_hash({key: versions})
                    files.append(Written(len(versions), h, min(times), max(times)))
                if _overlap(files):
                    got = self._one_each(folder, len(schema.columns))
                else:
                    got = (sum(f.n for f in files), sum(f.h for f in files))
                n, total = n + got[0], total + got[1]
                self.wh.promote(folder, schema.name, str(key))
            out[schema.name] = (n, total)
        return out

    def _withdraw(self) -> None:
        """The events delete lines name taken out of the tasks' files of their epochs, as
        `ingest.withdraw` takes them (the corpus's facts are not the landing's: none is
        withdrawn); a repeated delete line counted as a repeat, one that names no event
        the tasks wrote quarantined. Read and written by this process, epoch by epoch."""
        unmatched: list[tuple[str, int, str, str]] = []
        self.got["withdrawn"] = 0
        for (i, key), lines in sorted(self.deletions.items()):
            schema = self.inputs[i]
            first: dict[tuple[Any, ...], Deletion] = {}
            for d in lines:
                first.setdefault((*d.values, d.t), d)
            self.got["repeats"] += len(lines) - len(first)
            folder = os.path.join(self.roots[i], str(key))
            names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
            keys = [*schema.columns, "t"]
            found: set[tuple[Any, ...]] = set()
            if names:
                whole = pa.concat_tables([pq.read_table(os.path.join(folder, x)) for x in names])
                gone = pa.Table.from_pylist([dict(zip(keys, k, strict=True)) for k in first])
                gone = gone.cast(whole.select(keys).schema)
                rows = pa.array(np.arange(whole.num_rows))
                hit = whole.select(keys).append_column("_row", rows)
                hit = hit.join(gone, keys, join_type="left semi")
                found = {tuple(r.values()) for r in hit.select(keys).to_pylist()}
                if found:  # the others kept in the order of their lines
                    dropped = pc.is_in(rows, value_set=hit.column("_row").combine_chunks())
                    kept = whole.filter(pc.invert(dropped))
                    for x in names:
                        os.remove(os.path.join(folder, x))
                    pq.write_table(kept, os.path.join(folder, "part-kept.parquet"))
                    arity = len(schema.columns)
                    times = kept.column("t")
                    self.wrote[(i, key)] = [
                        Written(
                            kept.num_rows,
                            hashes(kept, arity),
                            pc.min(times).as_py() if kept.num_rows else key,
                            pc.max(times).as_py() if kept.num_rows else key,
                        )
                    ]
            self.got["withdrawn"] += len(found)
            unmatched += [
                (d.file, d.line, NOTHING_TO_DELETE, d.text)
                for k, d in first.items()
                if k not in found
            ]
        if unmatched:
            self.got["bad"] += len(unmatched)
            more = self.spark.createDataFrame(
                unmatched, "file string, line long, reason string, text string"
            )
            self.bad_lines = self.bad_lines.unionByName(more)

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
        return table.num_rows, hashes(table, arity)

    def per_file(self) -> dict[str, tuple[int, int | None, int | None]]:
        """No Spark job."""
        return {file: self.read.get(f, (0, None, None)) for f, file in enumerate(self.files)}
