"""The record every stored version of an epoch keeps of itself (`reach.Stored`): when it
was stored, by which pass and plan, what it replaced, and over which times it differs
from that. Kept in ``<root>/<corpus>/_versions/<relation>/<key>.json`` on a warehouse on
this machine's disk (elsewhere none is kept, and every epoch is evaluated again)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from dagster_pomo.engine.reach import EVER, Stored

if TYPE_CHECKING:
    from dagster_pomo.engine.spark.warehouse import Warehouse

VERSIONS = "_versions"


@dataclass(frozen=True)
class Pass:
    """The pass storing versions now: when it began, and the plan it evaluates by."""

    basis: int
    plan: str


@contextmanager
def passing(wh: Warehouse, plan: str) -> Iterator[None]:
    """Within this block, the versions ``wh`` stores are a pass's begun now, by ``plan``
    (outside any, a version's pass is not known)."""
    before = wh.passing
    wh.passing = Pass(time.time_ns(), plan)
    try:
        yield
    finally:
        wh.passing = before


def note(
    wh: Warehouse,
    relation: str,
    key: str,
    touches: tuple[int, int] | None,
    before: Stored | None | bool = True,
) -> None:
    """Record the version of epoch ``key`` of ``relation`` just stored, which differs from
    the one it replaced over ``touches`` (`EVER` for a first version); ``before``, the
    record of that one where a provisional record stands in its place now (see
    `provisional`)."""
    folder = _folder(wh, relation)
    if folder is None:
        return
    if before is True:
        before = _read(folder / f"{key}.json")
    assert before is not True
    current = wh.passing
    basis = current.basis if current is not None else None
    plan = current.plan if current is not None else ""
    if before is not None and touches is None:
        # The same rows: the version stands as it was stored, now known to follow from
        # what this pass read (a rewrite of the same rows is no change to its readers).
        stored = replace(
            before,
            basis=basis if current is not None else before.basis,
            plan=plan if current is not None else before.plan,
        )
    else:
        stored = Stored(
            time.time_ns(),
            basis,
            plan,
            None if before is None or touches == EVER else before.stamp,
            None if before is None else before.basis,
            touches,
        )
    _write(folder, key, stored)


def _write(folder: Path, key: str, stored: Stored) -> None:
    """``stored`` as the record of epoch ``key``, replacing the one there whole."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{key}.", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(stored.as_json(), out)
    os.replace(partial, folder / f"{key}.json")


def provisional(wh: Warehouse, relation: str, key: str) -> Stored | None:
    """Before epoch ``key`` of ``relation`` is replaced where no kept files tell later what
    it was: a record of a first version stored now stands in for the one it will get (a
    process killed before `note` leaves it, and the epoch's readers evaluate again); the
    record it replaced, for `note`."""
    folder = _folder(wh, relation)
    if folder is None:
        return None
    before = _read(folder / f"{key}.json")
    current = wh.passing
    stand_in = Stored(
        time.time_ns(),
        current.basis if current is not None else None,
        current.plan if current is not None else "",
        None,
        None,
        EVER,
    )
    _write(folder, key, stand_in)
    return before


def forget(wh: Warehouse, relation: str, key: str) -> None:
    """The record of a version dropped by a failed evaluation removed: the epoch is
    evaluated again."""
    folder = _folder(wh, relation)
    if folder is not None:
        with suppress(FileNotFoundError):
            (folder / f"{key}.json").unlink()


def records(wh: Warehouse, relations: Iterable[str]) -> dict[str, dict[str, Stored]] | None:
    """Every record of ``relations``, by epoch key; None where the warehouse keeps none."""
    if not wh.is_local:
        return None
    out: dict[str, dict[str, Stored]] = {}
    for relation in relations:
        folder = _folder(wh, relation)
        found: dict[str, Stored] = {}
        if folder is not None and folder.is_dir():
            for f in folder.iterdir():
                if f.suffix == ".json" and not f.name.startswith("."):
                    record = _read(f)
                    if record is not None:
                        found[f.stem] = record
        out[relation] = found
    return out


def touches(old: pa.Table | None, new: pa.Table | None) -> tuple[int, int] | None:
    """The smallest ``kt`` and largest ``exp`` among the rows one of two versions of an
    epoch holds and the other does not (every column compared); None when they hold the
    same rows. Where rows cannot be compared column by column (lists), the bounds of both
    when they differ."""
    if old is None or not old.num_rows:
        return _bounds(new)
    if new is None or not new.num_rows:
        return _bounds(old)
    loose = pa.schema([f.with_nullable(True) for f in new.schema])
    if loose != pa.schema([f.with_nullable(True) for f in old.schema]) or not {
        "kt",
        "exp",
    } <= set(loose.names):
        return EVER  # stored with other columns: every row differs
    old, new = old.cast(loose), new.cast(loose)
    if any(pa.types.is_nested(f.type) for f in new.schema):
        if _sorted(old).equals(_sorted(new)):
            return None
        return _bounds(pa.concat_tables([old, new]))
    keys = new.column_names
    differ = pa.concat_tables(
        [
            new.join(old, keys=keys, join_type="left anti").select(["kt", "exp"]),
            old.join(new, keys=keys, join_type="left anti").select(["kt", "exp"]),
        ]
    )
    return _bounds(differ)


def _bounds(rows: pa.Table | None) -> tuple[int, int] | None:
    if rows is None or not rows.num_rows:
        return None
    if not {"kt", "exp"} <= set(rows.column_names):
        return EVER
    return int(pc.min(rows["kt"]).as_py()), int(pc.max(rows["exp"]).as_py())


def _sorted(table: pa.Table) -> pa.Table:
    flat = [f.name for f in table.schema if not pa.types.is_nested(f.type)]
    return table.sort_by([(c, "ascending") for c in flat]).combine_chunks()


def _folder(wh: Warehouse, relation: str) -> Path | None:
    local = wh.local_path(f"{wh.root}/{wh.corpus}/{VERSIONS}/{relation}")
    return Path(local) if local else None


def _read(path: Path) -> Stored | None:
    try:
        return Stored.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


__all__ = ["VERSIONS", "Pass", "forget", "note", "passing", "records", "touches"]
