"""What every materialization reports: row counts, a preview of the epoch's rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

from dagster_pomo.plan.schema import Schema
from dagster_pomo.timeline import show_time

if TYPE_CHECKING:
    from dagster_pomo.engine.spark.results import Results

PREVIEW_ROWS = 5


def relation_metadata(
    results: Results, schema: Schema, relation: str, last_key: str
) -> dict[str, Any]:
    """Rows stored over every epoch so far, and a preview of the last epoch's rows (two small
    Spark jobs: a count answered from Parquet footers, and a ``limit``)."""
    total = results.rows_total(relation)
    columns = [*schema.columns, *(key for _, key, _ in schema.aggregates)]
    stored = [*schema.columns, *(f"_agg_{fn}" for fn, _, _ in schema.aggregates)]
    rows = results.preview(relation, last_key, PREVIEW_ROWS)
    records = [
        TableRecord(
            {
                **{c: _plain(r[s]) for c, s in zip(columns, stored, strict=True)},
                "t": show_time(r["t"]),
                "exp": show_time(r["exp"]),
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
            TableColumn("exp", "string"),
        ]
    )
    return {
        "pomo/rows_total": total,
        "pomo/preview": MetadataValue.table(records, schema=table_schema),
    }


def _plain(value: object) -> object:
    return round(value, 6) if isinstance(value, float) else value
