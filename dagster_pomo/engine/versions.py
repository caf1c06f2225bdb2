"""Events as the engine stores them.

A derived event may be derived more than once; each derivation is a *version*
``(args, t, kt, exp, aggregates)`` that never changes once made. Matching works
on versions (a version is alive on ``[kt, exp)``), which is what keeps results
independent of how time is cut into epochs. Outputs merge the versions of one
event (same relation, args and ``t``): see :func:`merge_versions`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from dagster_pomo.lang.interpret import Value


@dataclass(frozen=True, order=True, slots=True)
class Version:
    t: int
    args: tuple[Value, ...]
    kt: int
    exp: int
    aggs: tuple[Value, ...] = ()
    tau: int = 0  # the match time that made it; orders versions of aggregates

    def alive_at(self, tau: int) -> bool:
        return self.kt <= tau < self.exp

    @property
    def identity(self) -> tuple[int, tuple[Value, ...]]:
        return (self.t, self.args)


def output_object(
    args: Iterable[Value], t: int, exp: int, keys: Iterable[str], aggs: Iterable[Value]
) -> dict[str, object]:
    """An event as outputs write it (``pomo run --out``): its arguments, ``t``, ``exp`` (null
    for never) and its aggregates by their keys. One definition for every writer."""
    from dagster_pomo.timeline import NEVER

    return {
        "args": list(args),
        "t": t,
        "exp": None if exp >= NEVER else exp,
        "aggregates": dict(zip(keys, aggs, strict=True)),
    }


def value_order(value: Value) -> tuple[int, Value]:
    """A value's place in the one order of values outputs sort by and `choose` picks the
    least by: booleans, then numbers, then text."""
    if isinstance(value, bool):
        return (0, value)
    if isinstance(value, int | float):
        return (1, value)
    return (2, value)


def merge_versions(rows: Iterable[Version], aggregating: bool) -> list[Version]:
    """One row per event: the latest version of an aggregate (largest ``kt``, then ``tau``);
    otherwise the smallest ``kt`` and the largest ``exp`` over its versions."""
    merged: dict[tuple[int, tuple[Value, ...]], Version] = {}
    for row in rows:
        seen = merged.get(row.identity)
        if seen is None:
            merged[row.identity] = row
        elif aggregating:
            if (row.kt, row.tau) > (seen.kt, seen.tau):
                merged[row.identity] = row
        else:
            merged[row.identity] = Version(
                row.t,
                row.args,
                min(seen.kt, row.kt),
                max(seen.exp, row.exp),
                (),
                min(seen.tau, row.tau),
            )
    return list(merged.values())


def digest(rows: Iterable[Version]) -> str:
    """A digest of a multiset of rows that is the same in every process and whatever their
    order (landing files may be split or listed anew): the sum of each row's 64-bit hash,
    with the count. A stored partition's data version, so that reading unchanged events
    again is no new data."""
    total, count = 0, 0
    for row in rows:  # a tuple's repr is twice as quick as the dataclass's
        fields = (row.t, row.args, row.kt, row.exp, row.aggs, row.tau)
        h = hashlib.blake2b(repr(fields).encode("utf-8"), digest_size=8).digest()
        total = (total + int.from_bytes(h, "big")) % (1 << 64)
        count += 1
    return f"{count}-{total:016x}"
