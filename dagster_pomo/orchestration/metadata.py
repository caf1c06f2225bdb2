"""What every materialization reports of its partition: row counts, a preview of its rows."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

from dagster_pomo.engine.cid import cid
from dagster_pomo.plan.schema import PROV, Schema
from dagster_pomo.timeline import show_time

if TYPE_CHECKING:
    from dagster_pomo.engine.stored import StoredResults

PREVIEW_ROWS = 5


def partition_metadata(
    results: StoredResults,
    schema: Schema,
    relation: str,
    keys: Sequence[str],
    history: Sequence[str],
    kept: Collection[str] = (),
) -> dict[str, dict[str, Any]]:
    """What each partition of a run holds, by epoch key (``keys``, the run's partitions in
    time order; ``history``, every epoch key from the first partition through the run's
    last): its versions (``pomo/new_rows``, ``dagster/partition_row_count``), those stored
    over every epoch up to and including it (``pomo/rows_total``, ``dagster/row_count``:
    what a run of that partition alone, in time order, reports), the events this version of
    the partition added and withdrew against the one it replaced (``pomo/added``,
    ``pomo/withdrawn``; a first version adds every event it holds; none where the run
    ``kept`` the partition as stored, ``pomo/evaluated`` false), and a preview of its rows.
    A run over a range attaches each to its own partition."""
    counts = results.partition_rows(relation, history)
    changes = results.changes(relation, keys, kept)
    wanted = set(keys)
    out: dict[str, dict[str, Any]] = {}
    total = 0
    for key in history:
        total += counts.get(key, 0)
        if key in wanted:
            rows = counts.get(key, 0)
            out[key] = {
                "pomo/new_rows": rows,
                "dagster/partition_row_count": rows,
                "pomo/rows_total": total,
                "dagster/row_count": total,
                "pomo/added": changes[key].added if key in changes else 0,
                "pomo/withdrawn": changes[key].withdrawn if key in changes else 0,
                "pomo/evaluated": key not in kept,
                "pomo/preview": preview(results, schema, relation, key),
            }
    return out


def preview(results: StoredResults, schema: Schema, relation: str, key: str) -> MetadataValue:
    """The first rows of epoch ``key`` of ``relation`` by time, as a table: its columns,
    aggregates by their output names, ``t``, ``kt`` and ``exp`` as UTC times (``kt`` tells
    apart the versions of one event, each derived when what it rests on changed)."""
    columns = [*schema.columns, *(name for _, name, _ in schema.aggregates)]
    stored = [*schema.columns, *schema.aggregate_columns]
    rows = results.preview(relation, key, PREVIEW_ROWS)
    records = [
        TableRecord(
            {
                **{c: _plain(r[s]) for c, s in zip(columns, stored, strict=True)},
                "t": show_time(r["t"]),
                "kt": show_time(r["kt"]),
                "exp": show_time(r["exp"]),
                "cid": cid(relation, [r[c] for c in schema.columns], r["t"]),
                **({"provenance": _sources(r[PROV])} if schema.provenance else {}),
            }
        )
        for r in rows
    ]
    types = {"int": "int", "float": "float", "str": "string", "bool": "bool"}
    table_schema = TableSchema(
        columns=[
            *(
                TableColumn(c, types.get(t, "string"))
                for c, t in zip(
                    columns, [*schema.types, *(t for *_, t in schema.aggregates)], strict=True
                )
            ),
            TableColumn("t", "string"),
            TableColumn("kt", "string", description=KNOWN),
            TableColumn("exp", "string"),
            TableColumn("cid", "string", description=CID),
            *(
                [TableColumn("provenance", "string", description=PROVENANCE)]
                if schema.provenance
                else []
            ),
        ]
    )
    return MetadataValue.table(records, schema=table_schema)


KNOWN = "when this version became known (a later one of the same event is a revision)"
CID = "its content ID (an action's key is handler:cid; `pomo explain` says why it was derived)"
PROVENANCE = "content IDs of the input events it rests on (@provenance)"
SHOWN_SOURCES = 3


def _sources(cids: Sequence[str] | None) -> str:
    """A version's provenance as a preview cell: its first content IDs, and how many more
    (`pomo explain` or the warehouse's `_prov` column give them all)."""
    cids = list(cids or ())
    shown = ", ".join(cids[:SHOWN_SOURCES])
    more = len(cids) - SHOWN_SOURCES
    return f"{shown} (+{more} more)" if more > 0 else shown


def _plain(value: object) -> object:
    """A stored value as a preview cell: a float to 6 places, a collected set as JSON."""
    if isinstance(value, list | tuple):
        return json.dumps(list(value))
    return round(value, 6) if isinstance(value, float) else value
