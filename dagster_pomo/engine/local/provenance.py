"""Provenance in this process: each version's sorted list of the content IDs of the input
events it rests on, as Spark's plans carry it (docs/semantics.md, "Provenance").

A list is a Python tuple in a column of objects (a stored one comes back from Arrow as a
numpy array of strings); a union is sorted, each content ID once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from dagster_pomo.engine.cid import cids


def own(relation: str, columns: Sequence[np.ndarray], times: np.ndarray) -> np.ndarray:
    """Each input event's provenance: its own content ID alone."""
    ids = cids(relation, [c.tolist() for c in columns], times.tolist())
    return lists((i,) for i in ids)


def lists(values: Iterable[tuple[str, ...]]) -> np.ndarray:
    """``values`` as a column of objects (numpy would make a tuple a row of its own)."""
    items = list(values)
    out = np.empty(len(items), dtype=object)
    for k, item in enumerate(items):
        out[k] = item
    return out


def union(parts: Iterable[Iterable[str] | None]) -> tuple[str, ...]:
    """The provenance lists ``parts`` as one (None: none)."""
    return tuple(sorted({c for part in parts if part is not None for c in part}))


def united(columns: Sequence[np.ndarray], rows: int) -> np.ndarray:
    """Row by row, the union of ``columns``' lists (a match's atoms')."""
    if not columns:
        return lists(() for _ in range(rows))
    return lists(union(parts) for parts in zip(*columns, strict=True))


def united_by(order: np.ndarray, starts: np.ndarray, column: np.ndarray) -> np.ndarray:
    """The union of ``column``'s lists over each group: the rows ``order`` takes, each group's
    run beginning at ``starts`` (as `column_joins.groups` gives them)."""
    ends = [*starts[1:].tolist(), len(order)]
    return lists(union(column[order[a:b]]) for a, b in zip(starts.tolist(), ends, strict=True))


def running(codes: np.ndarray, column: np.ndarray) -> np.ndarray:
    """Each row's union with the rows before it of its key (``codes``, the rows sorted by
    key: each key's rows together)."""
    out = np.empty(len(column), dtype=object)
    held: set[str] = set()
    for k, (code, part) in enumerate(zip(codes.tolist(), column, strict=True)):
        if k and code != codes[k - 1]:
            held = set()
        held.update(part)
        out[k] = tuple(sorted(held))
    return out


def covered(known: np.ndarray, made: np.ndarray) -> np.ndarray:
    """Pair by pair, whether ``known``'s list holds every content ID of ``made``'s."""
    return np.array([set(m) <= set(k) for k, m in zip(known, made, strict=True)], dtype=bool)
