"""The Parquet warehouse: ``<root>/<corpus>/<relation>/epoch=<key>/*.parquet``.

Writing an epoch replaces exactly that epoch's directory (also with no rows), so
every step can be re-run. Events stamped after the epoch that made them (an
explicit future ``@time``) wait in ``<root>/<corpus>/_deferred/<relation>/``
until the epoch that knows them reads them. Files written without Spark's writer
(by the recursive rounds' tasks, or small epochs by this process; see ``staging`` and
``put``) gather in a ``_staging/`` folder beside their relation until they replace an
epoch whole.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from dagster_pomo.engine.event_lines import FileTimes
from dagster_pomo.engine.spark.epoch_changes import dropping, replacing
from dagster_pomo.engine.spark.epoch_versions import Pass
from dagster_pomo.engine.spark.frames import empty, local_table
from dagster_pomo.engine.spark.session import refuses_spark

STALE_SECONDS = 24 * 3600  # a staging folder this old was left by a run that died
# Stored versions this process reads itself from a local warehouse, rather than through a
# Spark job: a job costs more than reading so few, and Spark may not have started at all.
LOCAL_ROWS = 100_000
# The fewest rows of each file `Warehouse.put` writes side by side (3.8 million versions:
# 0.15 s in one file, 0.08 s in two on two cores).
PART_ROWS = 1_000_000


class Warehouse:
    def __init__(self, spark: SparkSession, root: str, corpus: str, plan_rows: int = 0) -> None:
        """``plan_rows``: see `read_stored` (`Policy.plan_rows`)."""
        self.spark = spark
        self.plan_rows = plan_rows
        # A folder named relative to where the run started: the JVM and Spark's Python
        # workers have folders of their own, so every part is given the same full path.
        self.root = (os.path.abspath(root) if _local(root) == root else root).rstrip("/")
        self.corpus = corpus
        self.passing: Pass | None = None  # the pass storing versions now (`epoch_versions`)
        # The tables this process put, while something else holds them, with the signature
        # of the files they became: `read_table` takes them instead of decoding the files.
        self._written: dict[tuple[str, str], tuple[tuple, weakref.ref[pa.Table]]] = {}

    @property
    def is_local(self) -> bool:
        """Whether the warehouse is on this machine's file system."""
        return is_local_path(self.root)

    def path(self, relation: str, key: str | None = None, deferred: bool = False) -> str:
        base = f"{self.root}/{self.corpus}/" + (f"_deferred/{relation}" if deferred else relation)
        return base if key is None else f"{base}/epoch={key}"

    def _filesystem(self, path: str):  # noqa: ANN202 (a JVM object)
        """Hadoop's file system and path object for ``path`` (any scheme Spark reads)."""
        jvm = self.spark.sparkContext._jvm  # type: ignore[attr-defined]
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
        conf = self.spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        return hadoop_path.getFileSystem(conf), hadoop_path

    def exists(self, path: str) -> bool:
        if _local(path):
            return os.path.isdir(_local(path))
        fs, hadoop_path = self._filesystem(path)
        return bool(fs.exists(hadoop_path))

    def local_path(self, path: str) -> str:
        """``path`` on this machine's file system, or "" when it is elsewhere."""
        return _local(path)

    def write(self, relation: str, key: str, df: DataFrame, deferred: bool = False) -> None:
        with replacing(self, relation, [key], deferred):
            df.write.mode("overwrite").parquet(self.path(relation, key, deferred))

    def remove(
        self, relation: str, key: str, deferred: bool = False, recorded: bool = True
    ) -> None:
        """Drop one epoch's directory, as writing it with no rows would, without a Spark job.
        Not ``recorded``: the epoch is dropped until it is stored again (a failed evaluation),
        and that version's changes are counted from what stood before the drop."""
        if recorded:
            with replacing(self, relation, [key], deferred):
                self.delete(self.path(relation, key, deferred))
        else:
            if not deferred:
                dropping(self, relation, key)
            self.delete(self.path(relation, key, deferred))

    def scratch(self, purpose: str) -> str:
        """A new folder's path (not made yet) for one run's intermediate files, under
        ``<root>/<corpus>/_scratch/``: wherever the warehouse is, Spark's tasks write there.
        Remove it with `delete`."""
        return f"{self.root}/{self.corpus}/_scratch/{purpose}-{uuid.uuid4().hex}"

    def delete(self, path: str) -> None:
        """Remove the folder ``path`` and what it holds, if it exists."""
        if _local(path):
            shutil.rmtree(_local(path), ignore_errors=True)
            return
        fs, hadoop_path = self._filesystem(path)
        fs.delete(hadoop_path, True)

    def staging(self, relation: str, deferred: bool = False) -> str | None:
        """A new empty local folder, beside the relation's epochs, for files written without
        Spark's writer (by tasks or this process); None when the warehouse is not on the
        local file system. Folders untouched for a day are removed first: a run killed
        part-way left them."""
        local = _local(self.path(relation, deferred=deferred))
        if not local:
            return None
        base = Path(local).parent / "_staging"
        with contextlib.suppress(FileNotFoundError):  # another writer emptied and removed it
            for left in base.iterdir():
                with contextlib.suppress(OSError):  # another writer may remove it too
                    if left.stat().st_mtime < time.time() - STALE_SECONDS:
                        shutil.rmtree(left, ignore_errors=True)
        while True:
            try:
                base.mkdir(parents=True, exist_ok=True)
                return tempfile.mkdtemp(prefix=f"{relation}-", dir=base)
            except (FileNotFoundError, FileExistsError):
                continue  # another writer removed the emptied base just now

    def promote(self, staging: str, relation: str, key: str, deferred: bool = False) -> None:
        """Make the files of ``staging`` epoch ``key`` of ``relation``: the old directory is
        moved aside and the new one moved in (two renames), so a reader sees one or the other
        whole, and a failure before leaves the old one as it was."""
        target = Path(_local(self.path(relation, key, deferred)))
        target.parent.mkdir(parents=True, exist_ok=True)
        old = Path(staging).with_name(Path(staging).name + ".old")
        with replacing(self, relation, [key], deferred):
            if target.exists():
                target.rename(old)
            Path(staging).rename(target)
        shutil.rmtree(old, ignore_errors=True)
        _tidy(Path(staging).parent)

    def put(self, relation: str, key: str, table: pa.Table, deferred: bool = False) -> None:
        """``table`` as epoch ``key`` of ``relation``, written by this process with no Spark
        job (the warehouse must be on the local file system): Parquet files in a staging
        folder, which then replaces the epoch whole (see ``promote``). A large epoch is cut
        in consecutive parts written side by side, one a core (`PART_ROWS` rows at least
        each: Arrow's writer encodes a file on one core); read in order of their names they
        are the table again."""
        staging = self.staging(relation, deferred)
        if staging is None:
            raise ValueError(f"{self.root} is not on the local file system")
        count = max(1, min(os.cpu_count() or 1, table.num_rows // PART_ROWS))
        size = -(-table.num_rows // count)
        parts = [table.slice(i * size, size) for i in range(count)]

        def write(i: int) -> None:
            pq.write_table(parts[i], os.path.join(staging, f"part-{i:05d}.snappy.parquet"))

        try:
            if count == 1:
                write(0)
            else:
                with ThreadPoolExecutor(count, thread_name_prefix="pomo-put") as pool:
                    list(pool.map(write, range(count)))
        except BaseException:
            self.discard(staging)
            raise
        self.promote(staging, relation, key, deferred)
        if not deferred:
            self._remember(relation, key, table)

    def _remember(self, relation: str, key: str, table: pa.Table) -> None:
        """``table`` is what epoch ``key`` of ``relation`` holds now, while it lives."""
        place = (relation, key)

        def gone(ref: weakref.ref[pa.Table]) -> None:
            if self._written.get(place, (None, None))[1] is ref:
                self._written.pop(place, None)

        self._written[place] = (self.signature(relation, key), weakref.ref(table, gone))

    def _held(self, relation: str, key: str) -> pa.Table | None:
        """The table this process put as epoch ``key`` of ``relation``, if it still lives
        and the epoch's files are still those it became (no other writer replaced them)."""
        signature, ref = self._written.get((relation, key), ((), None))
        table = ref() if ref is not None else None
        if table is None or signature != self.signature(relation, key):
            return None
        return table

    def signature(self, relation: str, key: str) -> tuple[tuple[str, int, int, int], ...]:
        """What tells one writing of epoch ``key`` of ``relation`` from another: its Parquet
        files' names, sizes, inodes and modification times (empty: nothing stored). Every
        writer replaces an epoch's files whole (see ``promote``), so a rewrite shows here;
        the warehouse must be on the local file system."""
        folder = _local(self.path(relation, key))
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return ()
        files = []
        for entry in entries:
            if entry.name.endswith(".parquet") and not entry.name.startswith("."):
                st = entry.stat()
                files.append((entry.name, st.st_size, st.st_ino, st.st_mtime_ns))
        return tuple(sorted(files))

    def stored_rows(self, relation: str, key: str, deferred: bool = False) -> int:
        """How many rows epoch ``key`` of ``relation`` holds, read from its Parquet files'
        footers (no Spark job); the warehouse must be on the local file system."""
        folder = Path(_local(self.path(relation, key, deferred)))
        if not folder.is_dir():
            return 0
        return sum(pq.read_metadata(f).num_rows for f in folder.glob("*.parquet"))

    def holds_few(self, relation: str, keys: Iterable[str]) -> bool:
        """Whether the warehouse is local and its epochs ``keys`` of ``relation`` hold at
        most `LOCAL_ROWS` versions: this process reads them (`read_table`) faster than a
        Spark job would, and without starting Spark; or any number, where Spark must not
        start (``--engine local``)."""
        if not self.is_local:
            return False
        return refuses_spark(self.spark) or self.stored_total(relation, keys) <= LOCAL_ROWS

    def stored_total(self, relation: str, keys: Iterable[str], deferred: bool = False) -> int:
        """How many versions the epochs ``keys`` of ``relation`` hold (`stored_rows`)."""
        return sum(self.stored_rows(relation, k, deferred) for k in keys)

    def stored_keys(self, relation: str, deferred: bool = False) -> set[str]:
        """The epochs of ``relation`` stored (one listing of its folder; the warehouse must be
        on the local file system)."""
        folder = Path(_local(self.path(relation, deferred=deferred)))
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return set()
        return {n.removeprefix("epoch=") for n in names if n.startswith("epoch=")}

    def stored_times(self, relation: str, keys: Iterable[str]) -> dict[str, FileTimes]:
        """Per stored epoch of ``keys``: its rows, and the least and greatest ``t`` of its
        versions (None when a file's statistics do not say), read from the Parquet files'
        footers (no Spark job; the warehouse must be on the local file system)."""
        out: dict[str, FileTimes] = {}
        for key in keys:
            folder = Path(_local(self.path(relation, key)))
            if not folder.is_dir():
                continue
            rows, least, greatest = 0, None, None
            known = True
            for f in folder.glob("*.parquet"):
                meta = pq.read_metadata(f)
                rows += meta.num_rows
                paths = [meta.schema.column(i).path for i in range(meta.num_columns)]
                column = paths.index("t") if "t" in paths else -1
                for g in range(meta.num_row_groups):
                    group = meta.row_group(g)
                    stats = group.column(column).statistics if column >= 0 else None
                    if not group.num_rows:
                        continue
                    if stats is None or not stats.has_min_max:
                        known = False
                        continue
                    least = stats.min if least is None else min(least, stats.min)
                    greatest = stats.max if greatest is None else max(greatest, stats.max)
            out[key] = (rows, least, greatest) if known else (rows, None, None)
        return out

    def read_table(
        self,
        relation: str,
        keys: Iterable[str],
        schema: pa.Schema,
        deferred: bool = False,
        times: tuple[int | None, int | None] = (None, None),
    ) -> pa.Table:
        """The stored epochs ``keys`` of ``relation`` read by this process, with no Spark job
        (the warehouse must be on the local file system); their versions whose ``t`` lies
        in ``times`` (``[lo, hi)``, None: unbounded). An epoch this process put, and still
        holds as it put it, is taken from memory (`_held`)."""
        lo, hi = times
        filters = [("t", ">=", lo)] if lo is not None else []
        filters += [("t", "<", hi)] if hi is not None else []
        parts = []
        for key in keys:
            held = None if deferred else self._held(relation, key)
            if held is not None:  # as the files would give it, with no decoding
                parts.append(held.filter(pq.filters_to_expression(filters)) if filters else held)
                continue
            folder = Path(_local(self.path(relation, key, deferred)))
            if folder.is_dir():
                parts += [
                    pq.read_table(f, filters=filters or None)
                    for f in sorted(folder.glob("*.parquet"))
                ]
        if not parts:
            return schema.empty_table()
        return pa.concat_tables([t.select(schema.names).cast(schema) for t in parts])

    def copy_folder(self, source: str, target: str) -> None:
        """Copy the folder ``source`` and what it holds to ``target`` (on Spark's file
        systems; a local one is copied by this process)."""
        if _local(source) and _local(target):
            shutil.copytree(_local(source), _local(target), dirs_exist_ok=True)
            return
        fs, src = self._filesystem(source)
        _, dst = self._filesystem(target)
        jvm = self.spark.sparkContext._jvm  # type: ignore[attr-defined]
        conf = self.spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        jvm.org.apache.hadoop.fs.FileUtil.copy(fs, src, fs, dst, False, conf)

    def discard(self, staging: str) -> None:
        shutil.rmtree(staging, ignore_errors=True)
        _tidy(Path(staging).parent)

    def write_text(self, name: str, text: str) -> str:
        """Replace the file ``<root>/<corpus>/<name>`` with ``text``; its path (any scheme
        Spark writes, so bad lines are kept wherever the warehouse is)."""
        return self.write_file(self.path(name), text)

    def write_file(self, path: str, text: str) -> str:
        """Replace the file ``path`` (in the warehouse) with ``text``; see `write_text`."""
        if _local(path):
            local = Path(_local(path))
            local.parent.mkdir(parents=True, exist_ok=True)
            # A name of its own per writer: two runs writing at once each replace the file
            # whole, and a reader sees the old file or a new one, never half of one.
            with tempfile.NamedTemporaryFile(
                "w", encoding="utf-8", dir=local.parent, prefix=f".{local.name}.", delete=False
            ) as partial:
                partial.write(text)
            Path(partial.name).replace(local)
            return str(local)
        fs, hadoop_path = self._filesystem(path)
        stream = fs.create(hadoop_path, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        return path

    def read_text(self, name: str) -> str | None:
        """The file ``<root>/<corpus>/<name>`` written by :meth:`write_text`, or None."""
        return self.read_file(self.path(name))

    def read_file(self, path: str) -> str | None:
        """The file ``path`` written by :meth:`write_file`, or None."""
        if _local(path):
            local = Path(_local(path))
            return local.read_text(encoding="utf-8") if local.is_file() else None
        fs, hadoop_path = self._filesystem(path)
        if not fs.exists(hadoop_path):
            return None
        jvm = self.spark.sparkContext._jvm  # type: ignore[attr-defined]
        stream = fs.open(hadoop_path)
        try:
            data = jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data).decode("utf-8")

    def write_partitioned(
        self, relation: str, df: DataFrame, keys: Iterable[str], deferred: bool = False
    ) -> None:
        """Rows with an ``epoch`` column, the directory of each epoch among them replaced (one
        Spark job); ``keys``, every epoch they may hold."""
        with replacing(self, relation, keys, deferred):
            (
                df.write.mode("overwrite")
                .option("partitionOverwriteMode", "dynamic")
                .partitionBy("epoch")
                .parquet(self.path(relation, deferred=deferred))
            )

    def read_all(self, relation: str, schema: StructType) -> DataFrame:
        """Every stored epoch of ``relation``."""
        path = self.path(relation)
        if not self.exists(path):
            return empty(self.spark, schema)
        return self.spark.read.schema(schema).parquet(path)

    def read(
        self, relation: str, schema: StructType, keys: Iterable[str], deferred: bool = False
    ) -> DataFrame:
        stored = self.read_stored(relation, schema, keys, deferred)
        return empty(self.spark, schema) if stored is None else stored

    def read_stored(
        self, relation: str, schema: StructType, keys: Iterable[str], deferred: bool = False
    ) -> DataFrame | None:
        """The epochs ``keys`` of ``relation`` that are stored, or None when none is.

        On this machine's disk, at most ``plan_rows`` versions are read by this process and
        go to Spark as a local relation, whose size its planner knows: for so few a scan
        costs more (listing the files, looking the data source up, a task to read them)
        than the rows do. The rows are read now rather than when a plan runs, which no
        caller can tell: nothing rewrites an epoch while plans that read it are unfinished."""
        keys = [k for k in keys if self.exists(self.path(relation, k, deferred))]
        if not keys:
            return None
        few = 0 < self.plan_rows and self.is_local
        if few and self.stored_total(relation, keys, deferred) <= self.plan_rows:
            table = self.read_table(relation, keys, to_arrow_schema(schema), deferred)
            return local_table(self.spark, table, schema)
        paths = [self.path(relation, k, deferred) for k in keys]
        return self.spark.read.schema(schema).parquet(*paths)


def is_local_path(path: str) -> bool:
    """Whether a warehouse at ``path`` is on this machine's file system."""
    return bool(_local(path))


def _local(path: str) -> str:
    """The local file system path of ``path``, or "" when it is on another file system."""
    if "://" not in path or path.startswith("file:"):
        return path.removeprefix("file://").removeprefix("file:")
    return ""


def _tidy(base: Path) -> None:
    """Remove the staging base once nothing is staged in it, so a warehouse holds only
    relations when no write is under way (another writer's folder keeps it)."""
    try:
        base.rmdir()
    except OSError:
        pass
