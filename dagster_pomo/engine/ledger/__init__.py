"""The action ledger: which handler has finished with which event, claimed by whom.

Two stores keep the same promises (see `engine.actions`): a SQLite file per corpus, the
embedded default for one machine, and PostgreSQL, for runs on several machines (a
``postgresql://`` URL). Both take claims by one rule (`claims.verdict`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dagster_pomo.engine.ledger.claims import LEASE, idempotency_key, new_owner
from dagster_pomo.engine.ledger.postgres import PostgresLedger, is_postgres, shown
from dagster_pomo.engine.ledger.sqlite import SqliteLedger

if TYPE_CHECKING:
    from dagster_pomo.engine.actions import ActionEvent


class Ledger(Protocol):
    """What running actions needs of a ledger."""

    where: str  # the file, or the URL without its password

    def done(self, keys: Sequence[str]) -> set[str]: ...
    def claim(
        self, events: Sequence[ActionEvent], owner: str, lease: float = LEASE
    ) -> tuple[list[ActionEvent], int]: ...
    def renew(self, keys: Sequence[str], owner: str, lease: float = LEASE) -> None: ...
    def release(self, keys: Sequence[str], owner: str) -> None: ...
    def finish(self, keys: Sequence[str]) -> None: ...
    def fail(self, key: str, error: str) -> None: ...
    def counts(self, handler: str | None = None) -> dict[str, int]: ...
    def attempts(self, handler: str) -> dict[str, int]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Ledger: ...
    def __exit__(self, *_: object) -> None: ...


def open_ledger(location: str | Path, corpus: str = "") -> Ledger:
    """The ledger at ``location``: a ``postgresql://`` URL (``corpus``'s rows in the
    database's shared table) or a SQLite file."""
    if isinstance(location, str) and is_postgres(location):
        return PostgresLedger(location, corpus)
    return SqliteLedger(location)


__all__ = [
    "LEASE",
    "Ledger",
    "PostgresLedger",
    "SqliteLedger",
    "idempotency_key",
    "is_postgres",
    "new_owner",
    "open_ledger",
    "shown",
]
