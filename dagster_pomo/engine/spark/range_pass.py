"""A range of epochs evaluated as one: a backfill's partitions in one pass per stratum.

For a corpus without ``@next`` the events derived do not depend on how time is cut into
epochs (docs/semantics.md, Epochs), and epoch by epoch each version ends up stored in the epoch its
``kt`` falls in: the epoch that derived it, or the one it was deferred to. So a range of
epochs of one length can be evaluated as one epoch and its versions split by ``kt`` into
the same partitions; versions stamped after the end of the epoch that made them (the
epoch of their ``_tau``) are also kept with that epoch's deferred events, as epoch by
epoch, so that a later run of any one partition finds what it would have found. One
Spark job (two with deferred events) per stratum, whatever the number of epochs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.timeline import Epoch, epoch_key


@dataclass(frozen=True)
class RangePass:
    """Consecutive epochs of one length, evaluated as ``epoch``."""

    epochs: tuple[Epoch, ...]

    @staticmethod
    def of(epochs: Sequence[Epoch]) -> RangePass | None:
        """One pass over ``epochs``, or None when they are fewer than two, not consecutive or
        not all of one length (the partition of a time is then not simple arithmetic)."""
        if len(epochs) < 2:
            return None
        size = epochs[0].end - epochs[0].start
        for before, after in zip(epochs, epochs[1:], strict=False):
            if after.previous is not before or after.end - after.start != size:
                return None
        return RangePass(tuple(epochs))

    @property
    def epoch(self) -> Epoch:
        first = self.epochs[0]
        return Epoch(first.start, self.epochs[-1].end, first.previous)

    @property
    def keys(self) -> list[str]:
        return [epoch_key(e) for e in self.epochs]

    def key_of(self, t: Column) -> Column:
        """The key of the range's epoch holding time ``t`` (earlier times: the first epoch's,
        where they are evaluated; callers keep times past the range's end out)."""
        start = self.epochs[0].start
        size = self.epochs[0].end - start
        index = F.greatest(F.floor((t - F.lit(start)) / F.lit(size)), F.lit(0))
        return (F.lit(start) + index * F.lit(size)).cast("string")

    def stamped_later(self, made: DataFrame) -> DataFrame:
        """Of versions derived over the span, those stamped after the end of the epoch that
        derived them (the epoch of their ``_tau``), with that epoch's key as ``epoch``: what
        each epoch keeps with its deferred events."""
        made_in = self.key_of(F.col("_tau"))
        later = (F.col("kt") >= self.epochs[-1].end) | (self.key_of(F.col("kt")) != made_in)
        return made.filter(later).withColumn("epoch", made_in)

    def store(self, wh: Warehouse, name: str, rows: DataFrame, later: DataFrame | None) -> int:
        """Store ``rows`` of ``name`` in the span's partitions by ``kt``, and ``later`` (see
        `stamped_later`, when the relation defers events) with the deferred events of the
        epochs in its ``epoch`` column. Every partition of the span is replaced; one that
        gets no row is removed. How many rows were stored in the span's partitions."""
        stored = rows.filter(F.col("kt") < self.epochs[-1].end)
        made = self._write(wh, name, stored.withColumn("epoch", self.key_of(F.col("kt"))), False)
        if later is not None:
            self._write(wh, name, later, deferred=True)
        return made

    def _write(self, wh: Warehouse, name: str, keyed: DataFrame, deferred: bool) -> int:
        """Rows with an ``epoch`` column into the span's partitions it names (one Spark job);
        partitions of the span that got none removed after. How many rows were written."""
        seen = Observation(f"span-{name}-{'deferred' if deferred else 'stored'}")
        keyed = keyed.observe(
            seen, F.count(F.lit(1)).alias("rows"), F.collect_set("epoch").alias("keys")
        )
        wh.write_partitioned(name, keyed, self.keys, deferred)
        result = seen.get
        written = set(result.get("keys") or ())
        for k in self.keys:
            if k not in written:
                wh.remove(name, k, deferred)
        return int(result.get("rows", 0))
