"""Events as the engine stores them.

A derived event may be derived more than once; each derivation is a *version*
``(args, t, kt, exp, aggregates)`` that never changes once made (a relation that carries
provenance adds the sorted content IDs of the input events it rests on). Matching works
on versions (a version is alive on ``[kt, exp)``), which is what keeps results
independent of how time is cut into epochs. Outputs merge the versions of one
event (same relation, args and ``t``): see :func:`merge_versions`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from dagster_pomo.lang.interpret import Value
from dagster_pomo.plan.schema import Schema


@dataclass(frozen=True, order=True, slots=True)
class Version:
    t: int
    args: tuple[Value, ...]
    kt: int
    exp: int
    aggs: tuple[Value, ...] = ()
    tau: int = 0  # the match time that made it; orders versions of aggregates
    prov: tuple[str, ...] = ()  # sorted distinct CIDs of its sources (carriers only)

    def alive_at(self, tau: int) -> bool:
        return self.kt <= tau < self.exp

    @property
    def identity(self) -> tuple[int, tuple[Value, ...]]:
        return (self.t, self.args)


def first_of_each_event(table: pa.Table, arity: int) -> pa.Table:
    """The stored input events of ``table`` (its first ``arity`` columns the arguments, then
    ``t``; ``kt``, ``exp`` follow from them) with each identity once, the first copy kept
    and the order kept: what `ingest.Ingested.add` does for events held in this process,
    for Arrow tables (Spark's tasks, their epochs' files). Values are normal already
    (`cid.normal`), so equal values are equal bits, and text compares whole."""
    if table.num_rows < 2:
        return table
    keys = [*table.column_names[:arity], "t"]
    numbered = table.select(keys).append_column("_row", pa.array(np.arange(table.num_rows)))
    first = numbered.group_by(keys, use_threads=False).aggregate([("_row", "min")])
    if first.num_rows == table.num_rows:
        return table
    return table.take(np.sort(first.column("_row_min").to_numpy()))


def record(row: Version, schema: Schema) -> tuple[object, ...]:
    """A version as a stored record, in the column order of `schema.row_columns`."""
    prov = (list(row.prov),) if schema.provenance else ()
    return (*row.args, *row.aggs, row.t, row.kt, row.exp, row.tau, *prov)


def from_record(values: Sequence[object], schema: Schema) -> Version:
    """A stored record (columns in `schema.row_columns` order) as a version."""
    n, k = len(schema.columns), len(schema.aggregates)
    t, kt, exp, tau = values[n + k : n + k + 4]
    prov = tuple(values[n + k + 4] or ()) if schema.provenance else ()
    # A collected set comes as a list; versions hold it as a tuple, as the reference makes it.
    aggs = tuple(tuple(v) if isinstance(v, list) else v for v in values[n : n + k])
    return Version(t, tuple(values[:n]), kt, exp, aggs, tau, prov)  # type: ignore[arg-type]


def output_object(
    args: Iterable[Value],
    t: int,
    exp: int,
    keys: Iterable[str],
    aggs: Iterable[Value],
    prov: Sequence[str] | None = None,
) -> dict[str, object]:
    """An event as outputs write it (``pomo run --out``): its arguments, ``t``, ``exp`` (null
    for never), its aggregates by their keys and, for a relation that carries it, its
    provenance (the sorted content IDs of its input events). One definition for every
    writer."""
    from dagster_pomo.timeline import NEVER

    obj: dict[str, object] = {
        # -0.0 is the event of 0.0 (equal keys, as Spark groups them): written as 0.0.
        "args": [v + 0.0 if isinstance(v, float) else v for v in args],
        "t": t,
        "exp": None if exp >= NEVER else exp,
        "aggregates": {
            k: list(v) if isinstance(v, tuple) else v for k, v in zip(keys, aggs, strict=True)
        },
    }
    if prov is not None:
        obj["provenance"] = list(prov)
    return obj


def event_object(row: Version, keys: Iterable[str], provenance: bool) -> dict[str, object]:
    """`output_object` of a merged version, with its provenance where its relation carries
    it."""
    prov = row.prov if provenance else None
    return output_object(row.args, row.t, row.exp, keys, row.aggs, prov)


def union(*sets: tuple[str, ...]) -> tuple[str, ...]:
    """Provenance merged: the sorted distinct content IDs of all ``sets`` (each sorted and
    distinct already, as a version's is). Relations without provenance merge empty sets
    on every version, so that costs nothing."""
    given = [s for s in sets if s]
    if len(given) <= 1:
        return given[0] if given else ()
    return tuple(sorted({c for s in given for c in s}))


def value_order(value: Value) -> tuple[int, Value]:
    """A value's place in the one order of values outputs sort by and `choose` picks the
    least by: booleans, then numbers, then text."""
    if isinstance(value, bool):
        return (0, value)
    if isinstance(value, int | float):
        return (1, value)
    return (2, value)


def output_order(row: Version) -> tuple[int, tuple[tuple[int, Value], ...]]:
    """Where an event comes in outputs: by time, then arguments (in `value_order`)."""
    return (row.t, tuple(value_order(v) for v in row.args))


def merge_versions(rows: Iterable[Version], aggregating: bool) -> list[Version]:
    """One row per event: the latest version of an aggregate (largest ``kt``, then ``tau``);
    otherwise the smallest ``kt`` and the largest ``exp`` over its versions. Provenance is
    the union over all its versions, an aggregate's too."""
    merged: dict[tuple[int, tuple[Value, ...]], Version] = {}
    for row in rows:
        seen = merged.get(row.identity)
        if seen is None:
            merged[row.identity] = row
        elif aggregating:
            latest = row if (row.kt, row.tau) > (seen.kt, seen.tau) else seen
            prov = union(seen.prov, row.prov)
            merged[row.identity] = latest if prov == latest.prov else replace(latest, prov=prov)
        else:
            merged[row.identity] = Version(
                row.t,
                row.args,
                min(seen.kt, row.kt),
                max(seen.exp, row.exp),
                (),
                min(seen.tau, row.tau),
                union(seen.prov, row.prov),
            )
    return list(merged.values())


def digest(rows: Iterable[Version]) -> str:
    """A digest of a multiset of rows that is the same in every process and whatever their
    order (landing files may be split or listed anew): the sum of each row's 64-bit hash,
    with the count. A stored partition's data version, so that reading unchanged events
    again is no new data."""
    return digest_of(*digest_terms(rows))


def digest_terms(rows: Iterable[Version]) -> tuple[int, int]:
    """How many ``rows`` and the sum of their `row_hash` values: terms that add up, so the
    `digest` of a union of parts is that of the sums of theirs."""
    total, count = 0, 0
    for row in rows:
        total += int.from_bytes(row_hash(row), "big")
        count += 1
    return count, total % (1 << 64)


def digest_of(count: int, total: int) -> str:
    """The `digest` of ``count`` rows whose `row_hash` values sum to ``total`` (taken modulo
    2^64 here: sums made elsewhere, by Spark, agree)."""
    return f"{count}-{total % (1 << 64):016x}"


def row_hash(row: Version) -> bytes:
    """The 8 bytes `digest` sums for ``row``."""
    # A tuple's repr is twice as quick as the dataclass's.
    fields: tuple[object, ...] = (row.t, row.args, row.kt, row.exp, row.aggs, row.tau)
    if row.prov:
        fields += (row.prov,)
    return hashlib.blake2b(repr(fields).encode("utf-8"), digest_size=8).digest()
