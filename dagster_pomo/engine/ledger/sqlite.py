"""The action ledger of one corpus in a SQLite file: the embedded default, for runs on
one machine (WAL, so readers never block; ``BEGIN IMMEDIATE`` serialises claims)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dagster_pomo.engine.ledger.claims import LEASE, Closes, Verdict, idempotency_key, verdict

if TYPE_CHECKING:
    from dagster_pomo.engine.actions import ActionEvent

_SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    key TEXT PRIMARY KEY,
    handler TEXT NOT NULL,
    relation TEXT NOT NULL,
    args TEXT NOT NULL,
    t INTEGER NOT NULL,
    epoch TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('started', 'done', 'failed')),
    attempts INTEGER NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    error TEXT,
    owner TEXT,
    lease_until REAL
);
CREATE INDEX IF NOT EXISTS actions_by_state ON actions (handler, state);
"""
KEYS_ARE_CIDS = 1  # the ledger's user_version once its keys are `handler:content ID`
CHUNK = 500  # keys per `IN (...)`: below SQLite's limit on parameters


class SqliteLedger(Closes):
    """One corpus's ledger in a SQLite file (see `engine.actions` for what it promises)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.where = str(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(actions)")}
        for column, typ in (("owner", "TEXT"), ("lease_until", "REAL")):
            if column not in columns:  # a ledger written before claims had owners
                self.db.execute(f"ALTER TABLE actions ADD COLUMN {column} {typ}")
        self._rekey()

    def _rekey(self) -> None:
        """Keys written before they were ``handler:content ID`` (a SHA-256 of the handler
        and the event) are rewritten from the event each row records, states kept: no
        event is handed over again for the change. Once per ledger (SQLite's
        ``user_version`` says it is done), not a scan of every key at every open."""
        if self.db.execute("PRAGMA user_version").fetchone()[0] >= KEYS_ARE_CIDS:
            return
        with self._transaction():
            old = self.db.execute(
                "SELECT key, handler, relation, args, t FROM actions WHERE instr(key, ':') = 0"
            ).fetchall()
            self.db.executemany(
                "UPDATE actions SET key = ? WHERE key = ?",
                [
                    (idempotency_key(h, rel, list(json.loads(args).values()), t), key)
                    for key, h, rel, args, t in old
                ],
            )
            self.db.execute(f"PRAGMA user_version = {KEYS_ARE_CIDS}")

    def close(self) -> None:
        self.db.close()

    def _rows(self, sql: str, keys: Sequence[str]) -> list[tuple]:
        """``sql`` (with ``{marks}`` for a list of keys) over ``keys``, a chunk at a time."""
        rows: list[tuple] = []
        for i in range(0, len(keys), CHUNK):
            chunk = keys[i : i + CHUNK]
            rows += self.db.execute(sql.format(marks=",".join("?" * len(chunk))), chunk)
        return rows

    def done(self, keys: Sequence[str]) -> set[str]:
        """Which of ``keys`` finished already."""
        sql = "SELECT key FROM actions WHERE state = 'done' AND key IN ({marks})"
        return {k for (k,) in self._rows(sql, keys)}

    def claim(
        self, events: Sequence[ActionEvent], owner: str, lease: float = LEASE
    ) -> tuple[list[ActionEvent], int]:
        """Claim the events whose keys are free (`claims.verdict`), in one transaction;
        the claimed events, and how many were left to a live owner."""
        now = time.time()
        claimed: list[ActionEvent] = []
        held = 0
        with self._transaction():
            sql = "SELECT key, state, owner, lease_until FROM actions WHERE key IN ({marks})"
            known = {k: (st, o, lu) for k, st, o, lu in self._rows(sql, [e.key for e in events])}
            for event in events:
                found = verdict(*known.get(event.key, (None, None, None)), owner, now)
                held += found is Verdict.HELD
                if found is Verdict.FREE:
                    claimed.append(event)
            self.db.executemany(
                "INSERT INTO actions (key, handler, relation, args, t, epoch, state, attempts,"
                " started_at, owner, lease_until) VALUES (?, ?, ?, ?, ?, ?, 'started', 1, ?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET state = 'started',"
                " attempts = attempts + 1, started_at = excluded.started_at, error = NULL,"
                " owner = excluded.owner, lease_until = excluded.lease_until",
                [
                    (
                        e.key, e.handler, e.relation, json.dumps(dict(e.args)), e.t, e.epoch,
                        now, owner, now + lease,
                    )
                    for e in claimed
                ],
            )  # fmt: skip
        return claimed, held

    def renew(self, keys: Sequence[str], owner: str, lease: float = LEASE) -> None:
        """Extend ``owner``'s claims on ``keys`` (those not finished yet)."""
        until = time.time() + lease
        with self._transaction():
            self.db.executemany(
                "UPDATE actions SET lease_until = ? WHERE key = ? AND owner = ?"
                " AND state = 'started'",
                [(until, k, owner) for k in keys],
            )

    def release(self, keys: Sequence[str], owner: str) -> None:
        """Give up ``owner``'s unfinished claims on ``keys`` (an interrupted call): the next
        run hands them over at once, rather than when the lease ends."""
        with self._transaction():
            self.db.executemany(
                "UPDATE actions SET lease_until = 0 WHERE key = ? AND owner = ?"
                " AND state = 'started'",
                [(k, owner) for k in keys],
            )

    def finish(self, keys: Sequence[str]) -> None:
        now = time.time()
        with self._transaction():
            self.db.executemany(
                "UPDATE actions SET state = 'done', finished_at = ?, lease_until = NULL"
                " WHERE key = ?",
                [(now, k) for k in keys],
            )

    def fail(self, key: str, error: str) -> None:
        with self._transaction():
            self.db.execute(
                "UPDATE actions SET state = 'failed', error = ?, lease_until = NULL WHERE key = ?",
                (error, key),
            )

    def counts(self, handler: str | None = None) -> dict[str, int]:
        """Keys per state (``started``, ``done``, ``failed``), for one handler or all."""
        sql = "SELECT state, COUNT(*) FROM actions"
        rows = self.db.execute(
            sql + (" WHERE handler = ? GROUP BY state" if handler else " GROUP BY state"),
            (handler,) if handler else (),
        )
        return dict(rows.fetchall())

    def attempts(self, handler: str) -> dict[str, int]:
        """How many times each of ``handler``'s keys was claimed."""
        rows = self.db.execute("SELECT key, attempts FROM actions WHERE handler = ?", (handler,))
        return dict(rows.fetchall())

    def _transaction(self) -> _Transaction:
        return _Transaction(self.db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *_: object) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")
