"""What the driver's callers see of a warehouse: plain Python values and Arrow tables.

The Dagster layer, the Airflow layer, the CLI and the pipeline's steps read what a run
stored through `StoredResults` and learn what an inputs step stored from `StoredLanding`;
the backend behind them (Spark's `engine/spark/results.py` today) is not their concern, and
no Spark type crosses the driver.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pyarrow as pa

    from dagster_pomo.engine.actions import ActionEvent, Subscription
    from dagster_pomo.engine.ingest import Ingested
    from dagster_pomo.engine.versions import Version


@dataclass(frozen=True)
class Change:
    """What one version of an epoch of a relation changed, in distinct events."""

    added: int
    withdrawn: int
    first: bool  # the epoch's first version: every event it holds is added

    def as_metadata(self) -> dict[str, int]:
        return {"added": self.added, "withdrawn": self.withdrawn}


UNCHANGED = Change(0, 0, False)  # an epoch a run kept as stored
WEIGHT = "weight"  # of a changed event: 1 added, -1 withdrawn (`changed_events`)


@dataclass
class StoredLanding:
    """What the inputs step of a pipeline read with the backend's tasks."""

    ingested: Ingested  # counts, every bad line, what each file held (`Landed`)
    digests: dict[str, str]  # by input relation: the `versions.digest` of what was stored
    counts: dict[str, int]  # ... and how many events


@runtime_checkable
class StoredResults(Protocol):
    """What a warehouse holds of a corpus, read for reports, handlers and outputs."""

    def partition_rows(self, relation: str, keys: Sequence[str]) -> dict[str, int]:
        """How many versions each epoch of ``keys`` holds (0 for one not stored)."""
        ...

    def preview(self, relation: str, key: str, limit: int) -> list[dict[str, Any]]:
        """The first ``limit`` versions of epoch ``key`` by time, arguments and known time."""
        ...

    def handler_events(
        self, subs: Sequence[Subscription], keys: Sequence[str]
    ) -> Iterator[ActionEvent]: ...

    def withdrawn_handler_events(
        self, subs: Sequence[Subscription], keys: Sequence[str]
    ) -> list[ActionEvent]: ...

    def versions_where(
        self,
        relation: str,
        keys: Sequence[str],
        made_by: int | None = None,
        expiring_from: int | None = None,
        t: int | None = None,
    ) -> list[Version]: ...

    def events(
        self, relation: str, keys: Sequence[str], aggregating: bool
    ) -> Iterator[Version]: ...

    def write_events(
        self,
        relation: str,
        keys: Sequence[str],
        aggregating: bool,
        path: Path,
        aggregate_keys: Sequence[str],
    ) -> int | None: ...

    def changes(
        self, relation: str, keys: Sequence[str], kept: Collection[str] = ()
    ) -> dict[str, Change]: ...

    def withdrawn(self, relation: str, keys: Sequence[str]) -> list[tuple[tuple, int, str]]: ...

    def changed_events(self, relation: str, key: str) -> pa.Table | None: ...

    def stored_keys(self, relation: str) -> set[str]: ...

    def read_text(self, name: str) -> str | None: ...

    def write_text(self, name: str, text: str) -> str: ...
