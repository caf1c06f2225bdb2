"""The example corpora (``dagster_pomo/rules/``, shipped with the package; ``rules/`` in a
checkout) and synthetic event streams for them (demo, benchmarks, tests).

Deterministic for a seed. Water tanks: each tank's level follows a slow random
walk with noise, a few tanks drift towards capacity, maintenance windows are
announced now and then.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

from dagster_pomo.engine.actions import ActionEvent, Handler

CORPORA = Path(__file__).resolve().parent / "rules"
HOUR = 3_600_000
DEFAULT_START = 1_700_000_000_000 // HOUR * HOUR  # 2023-11-14T22:00:00Z
TANKS = ("north", "south", "east")
CAPACITY = {"north": 100.0, "south": 80.0, "east": 120.0}


def tank_names(count: int) -> list[str]:
    """The corpus's three named tanks first, then ``tank-003``, ``tank-004``..."""
    return [*TANKS[:count], *(f"tank-{i:03d}" for i in range(len(TANKS), count))]


def water_tank_events(
    path: str | Path,
    readings: int,
    tanks: int = 3,
    hours: int = 24,
    start: int = DEFAULT_START,
    seed: int = 1,
) -> int:
    """Write ``readings`` water-level events (plus maintenance windows) spread evenly over
    ``hours`` hours to ``path`` as JSON Lines; returns the number of lines written."""
    rng = random.Random(seed)
    names = tank_names(tanks)
    level = {n: CAPACITY.get(n, 100.0) * rng.uniform(0.3, 0.7) for n in names}
    drift = {n: (0.02 if i % 3 == 0 else -0.005) for i, n in enumerate(names)}
    span = hours * HOUR
    step = span / max(1, readings)
    lines = 0
    with open(path, "w", encoding="utf-8") as out:
        for i in range(readings):
            t = start + int(i * step)
            tank = names[i % len(names)]
            cap = CAPACITY.get(tank, 100.0)
            level[tank] = min(
                cap * 1.05, max(0.0, level[tank] + drift[tank] + rng.gauss(0, cap * 0.002))
            )
            reading = round(level[tank] + rng.gauss(0, cap * 0.01), 2)
            out.write(
                json.dumps(
                    {"relation": "water_level", "t": t, "args": {"tank": tank, "level": reading}}
                )
                + "\n"
            )
            lines += 1
            if rng.random() < 2e-4:
                out.write(
                    json.dumps(
                        {
                            "relation": "maintenance",
                            "t": t,
                            "args": {"tank": tank, "reason": "inspection"},
                        }
                    )
                    + "\n"
                )
                lines += 1
    return lines


class SqliteOutbox:
    """An example action handler: records each event in a SQLite table ``effects``, keyed by
    the idempotency key, so handing it the same event twice has one effect (a real handler
    passes the key to the system it calls, as an idempotency key or a message id); as a
    `Listener`'s ``withdrawn`` (:meth:`withdraw`), each withdrawal in ``withdrawals``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._local = threading.local()  # a connection per thread, kept open

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=60)
            # Write-ahead logging: a commit appends to the log, and NORMAL syncs it at
            # checkpoints rather than at every commit; an effect committed survives a crash
            # of the process, as the ledger's own records do.
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            with db:
                for table in ("effects", "withdrawals"):
                    db.execute(
                        f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, "
                        "handler TEXT, relation TEXT, args TEXT, t INTEGER)"
                    )
            self._local.db = db
        return db

    def __call__(self, event: ActionEvent) -> None:
        self._record("effects", event)

    def withdraw(self, event: ActionEvent) -> None:
        """Record that ``event``, handed over before, is withdrawn."""
        self._record("withdrawals", event)

    def _record(self, table: str, event: ActionEvent) -> None:
        db = self._db()
        with db:  # committed before the call returns: the ledger then marks it done
            db.execute(
                f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                (event.key, event.handler, event.relation, json.dumps(dict(event.args)), event.t),
            )

    def keys(self) -> set[str]:
        """The key of every recorded effect."""
        if not self.path.exists():
            return set()
        with closing(sqlite3.connect(self.path)) as db:
            return {key for (key,) in db.execute("SELECT key FROM effects")}

    def effects(self) -> list[tuple[str, str, str, int]]:
        """``(handler, relation, args JSON, t)`` of every recorded effect, in time order."""
        return self._rows("effects")

    def withdrawn(self) -> list[tuple[str, str, str, int]]:
        """``(handler, relation, args JSON, t)`` of every recorded withdrawal, in time order."""
        return self._rows("withdrawals")

    def _rows(self, table: str) -> list[tuple[str, str, str, int]]:
        if not self.path.exists():
            return []
        with closing(sqlite3.connect(self.path)) as db:
            return db.execute(
                f"SELECT handler, relation, args, t FROM {table} ORDER BY t, handler, args"
            ).fetchall()


def outbox_handlers(
    corpus: str | Path, outbox: str | Path, withdrawals: bool = False
) -> dict[str, Handler]:
    """A :class:`SqliteOutbox` at ``outbox`` for every handler the corpus file names; with
    ``withdrawals``, as a `Listener` that also records the withdrawals of what it recorded."""
    from dagster_pomo.engine.actions import Listener, subscriptions
    from dagster_pomo.lang import load_program

    box = SqliteOutbox(outbox)
    handler: Handler = Listener(box, box.withdraw) if withdrawals else box
    return dict.fromkeys(subscriptions(load_program(corpus)), handler)


def flags(a: int, b: int) -> int:
    """A lattice of bit sets: merged by bitwise or (`@lattice("flags", bits)`)."""
    return a | b


def longest(a: str, b: str) -> str:
    """A lattice of text: the longer wins, then the later in code-point order."""
    return max(a, b, key=lambda s: (len(s), s))


# Lattices the examples and tests register (`pomo run --lattice flags=dagster_pomo.examples:flags`).
LATTICES = {"flags": flags, "longest": longest}
