"""What each new version of a stored epoch changed: the events it added and withdrew.

An event is its relation, arguments and time (what a content ID names and an action is
keyed by); an epoch of a relation holds the events its versions make. When a writer
replaces an epoch that was stored before, the files it replaces are first kept aside
(``_before/<relation>/epoch=<key>/``: hard links on a local disk, so nothing is copied),
unless an earlier replacement that never finished kept them already; once the new files
are in, the two epochs' events are compared and the difference stored beside the epoch in
``_changes/<relation>/epoch=<key>/``: ``changes.parquet`` (the events, each with a
``weight``, +1 added, -1 withdrawn) and ``summary.json`` (how many of each). An epoch stored
for the first time records nothing: every event it holds is added. A failure between
the two leaves the kept files, so the next version is compared with what stood before the
failed one. Relations the engine keeps for itself (named ``_...``) and deferred events
record none.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dagster_pomo.engine.reach import EVER, deferred_name
from dagster_pomo.engine.spark import epoch_versions
from dagster_pomo.engine.stored import WEIGHT, Change
from dagster_pomo.plan.schema import AGGREGATE_PREFIX

if TYPE_CHECKING:
    from dagster_pomo.engine.spark.warehouse import Warehouse

BEFORE = "_before"
CHANGES = "_changes"
ROWS = "changes.parquet"
SUMMARY = "summary.json"


def recorded(relation: str, deferred: bool) -> bool:
    """Whether replacing an epoch of ``relation`` records what changed."""
    return not deferred and not relation.startswith("_")


@contextmanager
def replacing(wh: Warehouse, relation: str, keys: Iterable[str], deferred: bool) -> Iterator[None]:
    """Around a writer that replaces the epochs ``keys`` of ``relation``: keep the old files
    aside before, record the changes after (not when the writer fails)."""
    if deferred and wh.local_path(wh.path(relation, deferred=True)):
        # No changes recorded, but the times a version differs over, for `engine.reach`.
        name, keys = deferred_name(relation), list(keys)
        old = {k: _rows(_local_folder(wh, relation, k)) for k in keys}
        was = {k: epoch_versions.provisional(wh, name, k) for k in keys}
        yield
        for k in keys:
            new = _rows(_local_folder(wh, relation, k))
            touched = epoch_versions.touches(_stored_at_kt(old[k]), _stored_at_kt(new))
            epoch_versions.note(wh, name, k, touched, was[k])
        return
    if not recorded(relation, deferred):
        yield
        return
    keys = list(keys)
    for key in keys:
        keep_before(wh, relation, key)
    yield
    for key in keys:
        record(wh, relation, key)


def _stored_at_kt(rows: pa.Table | None) -> pa.Table | None:
    """Deferred events with ``exp`` at least past their ``kt``: the epoch their ``kt`` falls
    in stores them, alive there or not (one stamped after its matches expired is too)."""
    if rows is None or not {"kt", "exp"} <= set(rows.column_names):
        return rows
    later = pc.max_element_wise(rows["exp"], pc.add(rows["kt"], 1))
    return rows.set_column(rows.column_names.index("exp"), "exp", later)


def _local_folder(wh: Warehouse, relation: str, key: str) -> Path | None:
    """The folder of epoch ``key`` of ``relation``'s deferred events on this machine."""
    local = wh.local_path(wh.path(relation, key, deferred=True))
    return Path(local) if local else None


def keep_before(wh: Warehouse, relation: str, key: str) -> None:
    """Keep the files of epoch ``key`` of ``relation`` aside before they are replaced,
    unless files kept by an unfinished replacement are there already."""
    epoch, base = wh.path(relation, key), _before(wh, relation, key)
    local_epoch, local_base = wh.local_path(epoch), wh.local_path(base)
    if local_epoch and local_base:
        _link_aside(Path(local_epoch), Path(local_base))
    elif not wh.exists(base) and wh.exists(epoch):
        wh.copy_folder(epoch, base)


def dropping(wh: Warehouse, relation: str, key: str) -> None:
    """Before epoch ``key`` of ``relation`` is dropped by a failed evaluation: its files kept
    aside, so that the version stored next is compared with them, and the record of the
    version dropped removed."""
    if recorded(relation, False):
        keep_before(wh, relation, key)
        wh.delete(_changes(wh, relation, key))
        epoch_versions.forget(wh, relation, key)


def _link_aside(epoch: Path, base: Path) -> None:
    """Hard links to ``epoch``'s Parquet files in ``base``, which appears whole or not at all."""
    if base.is_dir() or not epoch.is_dir():
        return
    while True:
        try:
            base.parent.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=f".{base.name}.", dir=base.parent))
            break
        except FileNotFoundError:
            continue  # another relation's writer removed the emptied folders just now
    for f in epoch.iterdir():
        if f.suffix == ".parquet" and not f.name.startswith((".", "_")):
            try:
                os.link(f, partial / f.name)
            except OSError:  # a file system without hard links
                shutil.copy2(f, partial / f.name)
    try:
        partial.rename(base)
    except OSError:  # another writer kept them first
        shutil.rmtree(partial, ignore_errors=True)


def record(wh: Warehouse, relation: str, key: str) -> Change | None:
    """Compare the new epoch ``key`` of ``relation`` with the files kept before it, store the
    difference and drop the kept files; None for a first version (a stale record of an
    earlier life of the epoch is removed)."""
    base, target = _before(wh, relation, key), _changes(wh, relation, key)
    if not wh.exists(base):
        wh.delete(target)
        epoch_versions.note(wh, relation, key, EVER)
        return None
    if wh.local_path(base):
        old = _rows(Path(wh.local_path(base)))
        new = _rows(Path(wh.local_path(wh.path(relation, key))))
        rows = _difference(_distinct(old), _distinct(new))
        change = Change(_count(rows, 1), _count(rows, -1), False)
        _store_local(Path(wh.local_path(target)), rows, change)
        epoch_versions.note(wh, relation, key, epoch_versions.touches(old, new))
    else:
        change = _record_with_spark(wh, base, wh.path(relation, key), target)
    wh.delete(base)
    if wh.local_path(base):  # no empty folders left when nothing is kept
        for folder in Path(wh.local_path(base)).parents[:2]:
            with suppress(OSError):
                folder.rmdir()
    return change


def _events(folder: Path | None) -> pa.Table | None:
    """The distinct events of an epoch's Parquet files (their columns up to ``t``), or None
    when it holds no file."""
    return _distinct(_rows(folder, events_only=True))


def _rows(folder: Path | None, events_only: bool = False) -> pa.Table | None:
    """The rows of an epoch's Parquet files (only the columns that make an event with
    ``events_only``), or None when it holds no file."""
    if folder is None or not folder.is_dir():
        return None
    files = sorted(
        f for f in folder.iterdir() if f.suffix == ".parquet" and not f.name.startswith((".", "_"))
    )
    if not files:
        return None
    columns = identity(pq.read_schema(files[0]).names) if events_only else None
    return pa.concat_tables([pq.read_table(f, columns=columns) for f in files])


def _distinct(rows: pa.Table | None) -> pa.Table | None:
    """The distinct events of an epoch's rows."""
    if rows is None:
        return None
    columns = identity(rows.column_names)
    return rows.select(columns).group_by(columns, use_threads=False).aggregate([])


def _difference(old: pa.Table | None, new: pa.Table | None) -> pa.Table | None:
    """The events of ``new`` not in ``old`` (weight 1), then those of ``old`` not in ``new``
    (weight -1); None when neither holds a file."""
    if old is None and new is None:
        return None
    old = old if old is not None else new.schema.empty_table()  # type: ignore[union-attr]
    new = new if new is not None else old.schema.empty_table()
    keys = new.column_names
    added = new.join(old, keys=keys, join_type="left anti").select(keys)
    withdrawn = old.join(new.cast(old.schema), keys=keys, join_type="left anti").select(keys)
    weights = [
        pa.array([1] * added.num_rows, pa.int8()),
        pa.array([-1] * withdrawn.num_rows, pa.int8()),
    ]
    return pa.concat_tables(
        [
            added.append_column(WEIGHT, weights[0]),
            withdrawn.cast(added.schema).append_column(WEIGHT, weights[1]),
        ]
    )


def _count(rows: pa.Table | None, weight: int) -> int:
    if rows is None or not rows.num_rows:
        return 0
    return int(pc.sum(pc.equal(rows[WEIGHT], weight)).as_py() or 0)


def _store_local(target: Path, rows: pa.Table | None, change: Change) -> None:
    """``rows`` and ``change`` as the record of ``target``, replacing an older one whole."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    if rows is not None:
        pq.write_table(rows, partial / ROWS)
    (partial / SUMMARY).write_text(json.dumps(change.as_metadata()), encoding="utf-8")
    old = partial.with_name(partial.name + ".old")
    if target.exists():
        target.rename(old)
    partial.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def _record_with_spark(wh: Warehouse, base: str, epoch: str, target: str) -> Change:
    """`record` for a warehouse Spark reaches and this process does not: two Spark jobs."""
    from pyspark.sql import functions as F

    old = wh.spark.read.parquet(base)
    columns = identity(old.columns)
    old = old.select(*columns).distinct()
    new = wh.spark.read.parquet(epoch).select(*columns).distinct() if wh.exists(epoch) else None
    new = new if new is not None else old.limit(0)
    rows = (
        new.subtract(old)
        .withColumn(WEIGHT, F.lit(1).cast("tinyint"))
        .unionByName(old.subtract(new).withColumn(WEIGHT, F.lit(-1).cast("tinyint")))
    )
    rows.write.mode("overwrite").parquet(f"{target}/{ROWS}")
    written = wh.spark.read.parquet(f"{target}/{ROWS}")
    counted = {r[WEIGHT]: r["count"] for r in written.groupBy(WEIGHT).count().collect()}
    change = Change(int(counted.get(1, 0)), int(counted.get(-1, 0)), False)
    wh.write_file(f"{target}/{SUMMARY}", json.dumps(change.as_metadata()))
    return change


def change_of(wh: Warehouse, relation: str, key: str) -> Change | None:
    """What the latest version of epoch ``key`` of ``relation`` changed (its removal
    too); None when the epoch was never stored, or was dropped by a failed evaluation."""
    text = wh.read_file(f"{_changes(wh, relation, key)}/{SUMMARY}")
    if text is not None:
        found = json.loads(text)
        return Change(int(found["added"]), int(found["withdrawn"]), False)
    if not wh.exists(wh.path(relation, key)):
        return None
    return Change(_distinct_events(wh, relation, key), 0, True)


def changed_events(wh: Warehouse, relation: str, key: str) -> pa.Table | None:
    """The events the latest version of epoch ``key`` of ``relation`` added (``weight`` 1)
    and withdrew (-1), read by this process: every event of a first version; None as for
    `change_of`."""
    target = _changes(wh, relation, key)
    if wh.read_file(f"{target}/{SUMMARY}") is not None:
        return _recorded(wh, target)
    if not wh.exists(wh.path(relation, key)):
        return None
    events = _epoch_events(wh, relation, key)
    if events is None:
        return None
    return events.append_column(WEIGHT, pa.array([1] * events.num_rows, pa.int8()))


def withdrawn_events(wh: Warehouse, relation: str, key: str) -> pa.Table | None:
    """The events the latest version of epoch ``key`` of ``relation`` withdrew (its
    arguments and ``t``), or None when it withdrew none (a first version withdraws none)."""
    target = _changes(wh, relation, key)
    text = wh.read_file(f"{target}/{SUMMARY}")
    if text is None or not json.loads(text)["withdrawn"]:
        return None
    rows = _recorded(wh, target)
    return rows.filter(pc.equal(rows[WEIGHT], -1)).drop_columns([WEIGHT])


def _recorded(wh: Warehouse, target: str) -> pa.Table:
    """The weighted events of the record at ``target``, read by this process."""
    local = wh.local_path(f"{target}/{ROWS}")
    return pq.read_table(local) if local else wh.spark.read.parquet(f"{target}/{ROWS}").toArrow()


def _epoch_events(wh: Warehouse, relation: str, key: str) -> pa.Table | None:
    """The distinct events of stored epoch ``key`` of ``relation``, read by this process
    (by Spark's reader where the warehouse is elsewhere); None when it holds no file."""
    local = wh.local_path(wh.path(relation, key))
    if local:
        return _events(Path(local))
    df = wh.spark.read.parquet(wh.path(relation, key))
    return df.select(*identity(df.columns)).distinct().toArrow()


def _distinct_events(wh: Warehouse, relation: str, key: str) -> int:
    """How many distinct events stored epoch ``key`` of ``relation`` holds (counted by a
    Spark job where the warehouse is elsewhere: none comes to this process)."""
    if wh.local_path(wh.path(relation, key)):
        events = _epoch_events(wh, relation, key)
        return 0 if events is None else events.num_rows
    df = wh.spark.read.parquet(wh.path(relation, key))
    return int(df.select(*identity(df.columns)).distinct().count())


def identity(columns: Sequence[str]) -> list[str]:
    """Of a relation's stored columns (`plan.schema.row_columns`), those that make an event:
    its arguments, then ``t`` (not an aggregate's value)."""
    end = columns.index("t")
    return [c for c in columns[:end] if not c.startswith(AGGREGATE_PREFIX)] + ["t"]


def _before(wh: Warehouse, relation: str, key: str) -> str:
    """Where the files an unfinished replacement of the epoch replaces are kept."""
    return wh.path(f"{BEFORE}/{relation}", key)


def _changes(wh: Warehouse, relation: str, key: str) -> str:
    """Where what the epoch's stored version changed is recorded."""
    return wh.path(f"{CHANGES}/{relation}", key)
