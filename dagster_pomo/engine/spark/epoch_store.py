"""Who writes an epoch's rows into the warehouse: this process or Spark's writer.

Where Spark runs in this machine and the warehouse is on its disk, a small epoch's rows
come to this process as Arrow and it writes them: one Spark job, about half the cost of
Spark's writer for a few rows (no output commit protocol). Larger epochs, and every epoch
elsewhere, go to Spark's writer. Either way the warehouse holds the same rows in the same
folders, and rows stamped after the epoch's end go with the deferred events.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from dagster_pomo.engine.spark.warehouse import Warehouse


class EpochStore:
    """Stores the epochs of derived relations, choosing the writer for each."""

    # An epoch of a relation with at most COLLECT_ROWS rows, in an epoch of at most
    # COLLECT_ROWS input events, is written by this process when it can be (see `store`).
    COLLECT_ROWS = 500_000

    def __init__(self, warehouse: Warehouse, inputs: Sequence[str], local: bool) -> None:
        """``inputs``: the corpus's input relations; ``local``: whether Spark runs in this
        machine and the warehouse is on its disk."""
        self.wh = warehouse
        self.local = local
        self._input_names = list(inputs)
        self._large: set[str] = set()  # relations Spark writes, see `store`
        self._inputs: dict[str, int] = {}  # input events per epoch key, see `input_events`

    def store(self, name: str, key: str, rows: DataFrame, end: int | None = None) -> int:
        """Store ``rows`` as epoch ``key`` of ``name`` (those stamped at or after ``end``, when
        given, with the deferred events); how many were stamped before ``end``.

        This process writes them when ``local``, unless the relation was found to have more
        than ``COLLECT_ROWS`` rows in an epoch (Spark writes it from then on; that once, its
        rows are worked out twice) or the epoch's input events alone are more than that."""
        if self.local and name not in self._large and self._small(key):
            # In one partition: a limit over several is a stage of its own, every row
            # shuffled to one task (~10% of a small epoch); the rows come to this one
            # process anyway, and their versions were merged by a shuffle before it.
            table = rows.coalesce(1).limit(self.COLLECT_ROWS + 1).toArrow()
            if table.num_rows <= self.COLLECT_ROWS:
                return self.put(name, key, table, end)
            self._large.add(name)
        if end is None:
            return self._write_counted(name, key, rows)
        return self._write_deferring(name, key, end, rows)

    def _small(self, key: str) -> bool:
        """Whether epoch ``key`` stores at most ``COLLECT_ROWS`` input events."""
        return 0 < self.COLLECT_ROWS and self.input_events(key) <= self.COLLECT_ROWS

    def input_events(self, key: str) -> int:
        """How many input events epoch ``key`` stores (counted from the files' footers, once
        an epoch: the warehouse must be on this machine's disk)."""
        if key not in self._inputs:
            self._inputs[key] = sum(self.wh.stored_rows(n, key) for n in self._input_names)
        return self._inputs[key]

    def put(self, name: str, key: str, table: pa.Table, end: int | None = None) -> int:
        """``table`` stored by this process, as :meth:`store` would have Spark store it."""
        if end is not None:
            stamped_later = pc.greater_equal(table["kt"], end)
            later = table.filter(stamped_later)
            if later.num_rows:
                self.wh.put(name, key, later, deferred=True)
            else:
                self.wh.remove(name, key, deferred=True)
            table = table.filter(pc.invert(stamped_later))
        self.wh.put(name, key, table)
        return table.num_rows

    def _write_counted(self, name: str, key: str, rows: DataFrame) -> int:
        """Store ``rows`` as epoch ``key`` of ``name`` with Spark's writer; how many (counted
        by the write itself, no extra Spark job)."""
        counted = Observation(f"rows-{name}")
        self.wh.write(name, key, rows.observe(counted, F.count(F.lit(1)).alias("rows")))
        return int(counted.get.get("rows", 0))

    def _write_deferring(self, name: str, key: str, end: int, rows: DataFrame) -> int:
        """Store ``rows`` stamped before ``end`` as epoch ``key``, and those stamped later with
        the deferred events. The rows are worked out once: the first write keeps them in memory
        and counts the later ones, which are written only when there are any (they rarely are)."""
        rows = rows.cache()
        later = Observation(f"later-{name}")
        now = rows.observe(later, F.count_if(F.col("kt") >= end).alias("rows"))
        try:
            made = self._write_counted(name, key, now.filter(F.col("kt") < end))
            if later.get.get("rows", 0):
                self.wh.write(name, key, rows.filter(F.col("kt") >= end), deferred=True)
            else:
                self.wh.remove(name, key, deferred=True)
        finally:
            rows.unpersist()
        return made
