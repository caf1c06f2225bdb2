"""The action ledger on PostgreSQL: one table for every corpus, shared by runs on any
number of machines (Dagster run workers in their own containers, Airflow workers).

A claim is one transaction: keys never seen are inserted as ``started``
(``ON CONFLICT DO NOTHING``: of two runs inserting one key, one wins, the other waits
for it and then sees its row); keys seen before are locked (``FOR UPDATE SKIP LOCKED``:
a row another run is claiming or finishing right now is that run's, counted as held)
and taken by `claims.verdict`, the rule the SQLite ledger follows. Keys go in sorted
order, so two claims never wait on each other in a cycle. The schema is versioned in
``pomo_ledger_schema`` and made or upgraded on first use, under an advisory lock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from dagster_pomo.engine.ledger.claims import LEASE, Closes, Verdict, verdict
from dagster_pomo.errors import UsageError

if TYPE_CHECKING:
    from dagster_pomo.engine.actions import ActionEvent

SCHEMES = ("postgresql://", "postgres://")
SCHEMA_VERSION = 1
# Each step brings the schema from the version before it to its own.
_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE pomo_actions (
        corpus TEXT NOT NULL,
        key TEXT NOT NULL,
        handler TEXT NOT NULL,
        relation TEXT NOT NULL,
        args JSONB NOT NULL,
        t BIGINT NOT NULL,
        epoch TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('started', 'done', 'failed')),
        attempts INTEGER NOT NULL,
        started_at DOUBLE PRECISION NOT NULL,
        finished_at DOUBLE PRECISION,
        error TEXT,
        owner TEXT,
        lease_until DOUBLE PRECISION,
        PRIMARY KEY (corpus, key)
    );
    CREATE INDEX pomo_actions_by_state ON pomo_actions (corpus, handler, state);
    """,
)
_LOCK = 0x706F6D6F  # the advisory lock held while the schema is made or upgraded
_RETRIES = 5  # a claim that meets a deadlock or a serialization failure tries again


def is_postgres(location: str) -> bool:
    """Whether a ledger location is a PostgreSQL URL (else it is a SQLite file)."""
    return location.startswith(SCHEMES)


def shown(url: str) -> str:
    """``url`` without its password, to print or to put in metadata."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise UsageError(
            "the action ledger is a PostgreSQL URL, and psycopg is not installed: "
            "pip install 'dagster-pomo[postgres]'"
        ) from None
    return psycopg


class PostgresLedger(Closes):
    """``corpus``'s actions in the ledger at ``url`` (see `engine.actions` for what it
    promises; the same as the SQLite ledger, across machines)."""

    def __init__(self, url: str, corpus: str) -> None:
        psycopg = _psycopg()
        self.where, self.corpus = shown(url), corpus
        self._errors = psycopg.errors
        try:
            # Not prepared: a prepared `key = ANY($1)` turns to a generic plan after five
            # runs, four times slower here than the plan made for each call's keys.
            self.db = psycopg.connect(
                url, autocommit=True, connect_timeout=30, prepare_threshold=None
            )
        except psycopg.OperationalError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"cannot open the action ledger at {self.where}: {first}") from None
        self._migrate()

    def _migrate(self) -> None:
        with self.db.transaction():
            self.db.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            self.db.execute("CREATE TABLE IF NOT EXISTS pomo_ledger_schema (version INTEGER)")
            row = self.db.execute("SELECT max(version) FROM pomo_ledger_schema").fetchone()
            version = row[0] or 0
            if version > SCHEMA_VERSION:
                raise UsageError(
                    f"the action ledger at {self.where} has schema version {version}, written "
                    f"by a newer dagster-pomo (this one knows {SCHEMA_VERSION}): upgrade it"
                )
            for step, sql in enumerate(_MIGRATIONS[version:], start=version + 1):
                self.db.execute(sql)
                self.db.execute("INSERT INTO pomo_ledger_schema VALUES (%s)", (step,))

    def close(self) -> None:
        self.db.close()

    def done(self, keys: Sequence[str]) -> set[str]:
        """Which of ``keys`` finished already."""
        rows = self.db.execute(
            "SELECT key FROM pomo_actions WHERE corpus = %s AND key = ANY(%s) AND state = 'done'",
            (self.corpus, list(keys)),
        )
        return {k for (k,) in rows}

    def claim(
        self, events: Sequence[ActionEvent], owner: str, lease: float = LEASE
    ) -> tuple[list[ActionEvent], int]:
        """Claim the events whose keys are free (`claims.verdict`), in one transaction;
        the claimed events, and how many were left to a live owner."""
        for attempt in range(_RETRIES):
            try:
                return self._claim(events, owner, lease)
            except (self._errors.DeadlockDetected, self._errors.SerializationFailure):
                if attempt == _RETRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def _claim(
        self, events: Sequence[ActionEvent], owner: str, lease: float
    ) -> tuple[list[ActionEvent], int]:
        now = time.time()
        by_key = {e.key: e for e in events}
        order = sorted(by_key)
        with self.db.transaction():
            new = self.db.execute(
                "INSERT INTO pomo_actions (corpus, key, handler, relation, args, t, epoch, state,"
                " attempts, started_at, owner, lease_until)"
                " SELECT %s, k, h, r, a::jsonb, t, e, 'started', 1, %s, %s, %s"
                " FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::bigint[],"
                " %s::text[]) AS u(k, h, r, a, t, e)"
                " ORDER BY k ON CONFLICT (corpus, key) DO NOTHING RETURNING key",
                (
                    self.corpus, now, owner, now + lease, order,
                    [by_key[k].handler for k in order],
                    [by_key[k].relation for k in order],
                    [json.dumps(dict(by_key[k].args)) for k in order],
                    [by_key[k].t for k in order],
                    [by_key[k].epoch for k in order],
                ),
            )  # fmt: skip
            free = {k for (k,) in new}
            seen = [k for k in order if k not in free]
            rows = self.db.execute(
                "SELECT key, state, owner, lease_until FROM pomo_actions"
                " WHERE corpus = %s AND key = ANY(%s) ORDER BY key FOR UPDATE SKIP LOCKED",
                (self.corpus, seen),
            ).fetchall()
            held = len(seen) - len(rows)  # locked by a run claiming or finishing them now
            taken = []
            for key, state, holder, until in rows:
                found = verdict(state, holder, until, owner, now)
                held += found is Verdict.HELD
                if found is Verdict.FREE:
                    taken.append(key)
            if taken:
                self.db.execute(
                    "UPDATE pomo_actions SET state = 'started', attempts = attempts + 1,"
                    " started_at = %s, error = NULL, owner = %s, lease_until = %s"
                    " WHERE corpus = %s AND key = ANY(%s)",
                    (now, owner, now + lease, self.corpus, taken),
                )
        mine = free | set(taken)
        return [e for e in events if e.key in mine], held

    def _update(self, sql: str, *params: object) -> None:
        """One statement: a transaction of its own (the connection commits each), one round
        trip to the server."""
        self.db.execute(sql, (*params, self.corpus))

    def renew(self, keys: Sequence[str], owner: str, lease: float = LEASE) -> None:
        """Extend ``owner``'s claims on ``keys`` (those not finished yet)."""
        self._update(
            "UPDATE pomo_actions SET lease_until = %s WHERE key = ANY(%s) AND owner = %s"
            " AND state = 'started' AND corpus = %s",
            time.time() + lease, sorted(keys), owner,
        )  # fmt: skip

    def release(self, keys: Sequence[str], owner: str) -> None:
        """Give up ``owner``'s unfinished claims on ``keys`` (an interrupted call): the next
        run hands them over at once, rather than when the lease ends."""
        self._update(
            "UPDATE pomo_actions SET lease_until = 0 WHERE key = ANY(%s) AND owner = %s"
            " AND state = 'started' AND corpus = %s",
            sorted(keys), owner,
        )  # fmt: skip

    def finish(self, keys: Sequence[str]) -> None:
        if len(keys) == 1:  # as actions finish: `key = %s` plans faster than `ANY` (~20%)
            self._update(
                "UPDATE pomo_actions SET state = 'done', finished_at = %s, lease_until = NULL"
                " WHERE key = %s AND corpus = %s",
                time.time(), keys[0],
            )  # fmt: skip
            return
        self._update(
            "UPDATE pomo_actions SET state = 'done', finished_at = %s, lease_until = NULL"
            " WHERE key = ANY(%s) AND corpus = %s",
            time.time(), sorted(keys),
        )  # fmt: skip

    def fail(self, key: str, error: str) -> None:
        self._update(
            "UPDATE pomo_actions SET state = 'failed', error = %s, lease_until = NULL"
            " WHERE key = %s AND corpus = %s",
            error, key,
        )  # fmt: skip

    def counts(self, handler: str | None = None) -> dict[str, int]:
        """Keys per state (``started``, ``done``, ``failed``), for one handler or all."""
        rows = self.db.execute(
            "SELECT state, COUNT(*) FROM pomo_actions WHERE corpus = %s"
            + (" AND handler = %s" if handler else "")
            + " GROUP BY state",
            (self.corpus, handler) if handler else (self.corpus,),
        )
        return dict(rows.fetchall())

    def attempts(self, handler: str) -> dict[str, int]:
        """How many times each of ``handler``'s keys was claimed."""
        rows = self.db.execute(
            "SELECT key, attempts FROM pomo_actions WHERE corpus = %s AND handler = %s",
            (self.corpus, handler),
        )
        return dict(rows.fetchall())
