"""Stored versions read by this process, for a stratum it works out itself.

Where Spark and the warehouse are on this machine, the process reads the epochs' Parquet
files with no Spark job, and keeps what it read, or stored itself, for the epochs after:
an epoch reads much of what the one before read or wrote (the history its lifetimes
reach), and converting it from Parquet again cost a sixth of an in-process epoch. A kept
epoch is used again only while its files are those it was read from or written to
(`Warehouse.signature`: another writer, Spark's included, replaces them whole), and
only while an epoch may still read it (`retain`). Elsewhere (a
cluster, Spark Connect, a warehouse on another file system) only a recursion over few
rows is worked out here (see `LocalStrata.takes`): its versions come through
Spark, one job per read, and a read of more than ``limit`` rows gives the stratum back to
Spark's plans (`TooLarge`) before anything is stored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from dagster_pomo.engine.local.arrow_schemas import arrow_schema
from dagster_pomo.engine.local.column_joins import Cols, TooLarge, concat, from_arrow, height, take
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.plan.schema import Schema


class ProcessReads:
    """What this process read of the warehouse, for the epoch under way and, from a local
    warehouse's files, for those after it."""

    def __init__(
        self,
        wh: Warehouse,
        schemas: Mapping[str, Schema],
        structs: Mapping[str, StructType],
        files: bool,
        limit: int,
    ) -> None:
        """``files``: whether this process reads the warehouse's files itself; ``limit``: the
        most rows one read through Spark may bring."""
        self.wh, self.schemas, self.structs = wh, schemas, structs
        self.files, self.limit = files, limit
        # Epochs read from their files (or stored by this process), with the files' signature.
        self._tables: dict[tuple[str, str], tuple[tuple, Cols | pa.Table]] = {}
        # A lock per stored epoch: strata run side by side read it once, not twice.
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        # Reads through Spark: for the epoch under way only (see `retain`).
        self._fetched: dict[tuple[str, tuple[str, ...], int | None], Cols] = {}

    def retain(self, wanted: Callable[[str, str], bool]) -> None:
        """A new epoch begins: keep the epochs ``wanted(relation, key)`` says it may read,
        and nothing read through Spark (what it read may have changed)."""
        self._tables = {k: v for k, v in self._tables.items() if wanted(*k)}
        self._locks = {k: v for k, v in self._locks.items() if k in self._tables}
        self._fetched.clear()

    def stored(self, name: str, keys: Sequence[str], after: int | None = None) -> Cols:
        """The stored epochs ``keys`` of ``name`` (their versions alive after ``after``,
        when given)."""
        if not self.files:
            key = (name, tuple(keys), after)
            if key not in self._fetched:
                rows = self.wh.read(name, self.structs[name], keys)
                if after is not None:
                    rows = rows.filter(F.col("exp") > after)
                self._fetched[key] = self.fetched(name, rows)
            return self._fetched[key]
        stored = self.wh.stored_keys(name) if len(keys) > 1 else set(keys)
        parts = [self.table(name, k) for k in keys if k in stored]
        if after is not None:
            parts = [take(p, p["exp"] > after) for p in parts]
        parts = [p for p in parts if height(p)]
        if len(parts) > 1:
            return concat(parts)
        return parts[0] if parts else self._empty(name)

    def table(self, name: str, key: str) -> Cols:
        """Stored epoch ``key`` of ``name``, read from its files (again only once they
        change)."""
        with self._locks.setdefault((name, key), threading.Lock()):
            signature = self.wh.signature(name, key)
            held = self._tables.get((name, key))
            if held is not None and held[0] == signature:
                rows = held[1]
                if isinstance(rows, pa.Table):  # stored by this process, not read yet
                    rows = from_arrow(rows)
                    self._tables[(name, key)] = (signature, rows)
                return rows
            schema = arrow_schema(self.schemas[name])
            rows = from_arrow(self.wh.read_table(name, [key], schema))
            self._tables[(name, key)] = (signature, rows)
            return rows

    def keep(self, name: str, key: str, rows: pa.Table) -> None:
        """``rows`` are epoch ``key`` of ``name`` now (this process stored them). Kept in
        Arrow and converted when first read: most stored epochs are not read again in the
        process (millions of versions took seconds to convert for nothing)."""
        self._tables[(name, key)] = (self.wh.signature(name, key), rows)

    def fetched(self, name: str, rows: DataFrame) -> Cols:
        """``rows`` of ``name`` brought to this process by Spark (one job); `TooLarge`
        beyond ``limit`` rows."""
        table = rows.limit(self.limit + 1).toArrow()
        if table.num_rows > self.limit:
            raise TooLarge(f"more than {self.limit:,} versions of {name} to read")
        schema = arrow_schema(self.schemas[name])
        return from_arrow(table.select(schema.names).cast(schema))

    def _empty(self, name: str) -> Cols:
        return from_arrow(arrow_schema(self.schemas[name]).empty_table())
