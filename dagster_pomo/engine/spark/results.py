"""What a warehouse holds of a corpus, read for people and for action handlers.

The Dagster layer reports row counts and previews, and hands stored events to handlers;
it reads them through this object (opened by `engine.driver`), never through Spark.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from dagster_pomo.engine.actions import ActionEvent, Subscription
from dagster_pomo.engine.spark.evaluator import struct_of
from dagster_pomo.engine.spark.handler_events import range_events
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.plan.schema import Schema


class Results:
    def __init__(self, warehouse: Warehouse, schemas: Mapping[str, Schema]) -> None:
        self.wh = warehouse
        self.schemas = schemas

    def rows_total(self, relation: str) -> int:
        """Versions stored over every epoch (a count Spark answers from Parquet footers)."""
        return self.wh.read_all(relation, struct_of(self.schemas[relation])).count()

    def preview(self, relation: str, key: str, limit: int) -> list[dict[str, Any]]:
        """The first ``limit`` versions of epoch ``key`` by time and arguments: each its
        stored columns by name (aggregates as ``_agg_<fn>``), ``t`` and ``exp``."""
        schema = self.schemas[relation]
        rows = (
            self.wh.read(relation, struct_of(schema), [key])
            .orderBy("t", *schema.columns)
            .limit(limit)
            .collect()
        )
        return [r.asDict() for r in rows]

    def handler_events(
        self, subs: Sequence[Subscription], keys: Sequence[str]
    ) -> Iterator[ActionEvent]:
        """Each event of the epochs ``keys`` that ``subs`` (one handler's) listen to, once,
        epoch by epoch (see `actions.range_events`)."""
        return range_events(self.wh, self.schemas, subs, keys)

    def read_text(self, name: str) -> str | None:
        """A file the engine keeps beside the corpus's relations, or None."""
        return self.wh.read_text(name)

    def write_text(self, name: str, text: str) -> str:
        """Replace a file kept beside the corpus's relations; its path."""
        return self.wh.write_text(name, text)
