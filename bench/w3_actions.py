"""W3: actions. Derived events handed to a no-op handler through the action ledger, against
a plain SQLite loop that de-duplicates with ``INSERT ... ON CONFLICT DO NOTHING``.

Both write to a file on disk in WAL mode with ``synchronous=NORMAL`` and commit every 256
events. The ledger records each event twice (``started`` before the handler, ``done``
after), which is what makes a crash between the two recoverable; the peer records it
once, so it cannot tell an event that crashed from one that finished. Each run then
delivers every event a second time (a retry, a backfill) and must run nothing. The
ledger on PostgreSQL runs the same deliveries against a throw-away local server, over
TCP (``synchronous_commit=off``, as durable as SQLite's ``NORMAL``: a crash of the
machine may lose the last commits, never corrupt them).
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.harness import Measurement, measure

BATCH = 256


def events(n: int) -> list:
    """``n`` distinct alert events, with their idempotency keys (made by the engine when it
    reads derived events, so not part of the ledger's cost)."""
    from dagster_pomo.engine.actions import ActionEvent, idempotency_key

    start = 1_700_000_000_000
    out = []
    for i in range(n):
        args = {"tank": f"tank{i % 50}", "average": 90.0 + (i % 1000) / 100}
        t = start + i * 1_000
        key = idempotency_key("notify", "overflow_alert", tuple(args.values()), t)
        out.append(ActionEvent(key, "notify", "overflow_alert", args, t, str(start)))
    return out


def run(repeat: int, count: int) -> list[Measurement]:
    from tests.postgres import new_database, postgres_server

    with postgres_server(durable=True) as server:
        return _run(repeat, count, lambda: new_database(server))


def _run(repeat: int, count: int, database: Callable[[], str]) -> list[Measurement]:
    from dagster_pomo.engine.actions import open_ledger, run_actions

    batch = events(count)
    case = f"{count:,} actions, no-op handler"
    with tempfile.TemporaryDirectory(prefix="pomo-bench-w3-") as tmp:
        runs = iter(range(10**6))

        def ledger(where: Callable[[], str]) -> dict:
            calls: list[str] = []
            book = open_ledger(where(), "bench")
            try:
                first = run_actions(lambda e: calls.append(e.key), batch, book, batch=BATCH)
                again = run_actions(lambda e: calls.append(e.key), batch, book, batch=BATCH)
            finally:
                book.close()
            duplicates = len(calls) - len(set(calls))
            if duplicates or first.ran != count or again.ran:
                raise AssertionError(f"ledger: {first.ran} ran, {again.ran} again, {duplicates}")
            return {
                "seconds": first.seconds,
                "actions_per_s": round(count / first.seconds),
                "redelivery_s": round(again.seconds, 3),
                "duplicates": duplicates,
            }

        def plain() -> dict:
            import time

            calls: list[str] = []
            db = sqlite3.connect(Path(tmp) / f"plain{next(runs)}.sqlite", isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE seen (key TEXT PRIMARY KEY)")
            times = []
            try:
                for _ in range(2):  # first delivery, then the redelivery
                    began = time.perf_counter()
                    for i in range(0, count, BATCH):
                        db.execute("BEGIN")
                        for event in batch[i : i + BATCH]:
                            inserted = db.execute(
                                "INSERT INTO seen (key) VALUES (?) ON CONFLICT DO NOTHING",
                                (event.key,),
                            ).rowcount
                            if inserted:
                                calls.append(event.key)
                        db.execute("COMMIT")
                    times.append(time.perf_counter() - began)
            finally:
                db.close()
            duplicates = len(calls) - len(set(calls))
            return {
                "seconds": times[0],
                "actions_per_s": round(count / times[0]),
                "redelivery_s": round(times[1], 3),
                "duplicates": duplicates,
            }

        return [
            measure(case, "SQLite ON CONFLICT loop", repeat, plain),
            measure(
                case, "dagster-pomo", repeat, lambda: ledger(lambda: f"{tmp}/l{next(runs)}.sqlite")
            ),
            measure(case, "dagster-pomo, PostgreSQL ledger", repeat, lambda: ledger(database)),
        ]
