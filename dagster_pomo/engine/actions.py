"""Actions: handlers called once per distinct derived event, through a ledger.

A corpus names handlers (``pattern ~ handler;`` or ``head ~ handler := ...``);
Python code registers callables under those names. Each distinct event
``(relation, args, t)`` that a handler listens to gets an idempotency key from
the handler's name and the event. Handlers are called until they succeed, each
call with the event's stable key; a handler that records the key has
exactly-once effects. The ledger (SQLite, beside the warehouse) makes it so:

- before a handler sees an event, its key is *claimed*: marked ``started`` with
  an owner (host, process, call) and a lease. Two runs that overlap (a sensor run
  and a scheduled run) never hand the same event over at the same time: a claim
  another live owner holds is left to it;
- each key is marked ``done`` as soon as its handler returns (durably, one
  transaction per event), and a ``done`` key is never handed over again (retries,
  re-runs, backfills, late data re-deriving the event);
- a key left ``started`` or ``failed`` is handed over again, with the same key,
  once its claim is free: at once when its handler raised or its owner's process
  on this machine has died, else when the lease ends. A crash therefore repeats
  at most the call that was in flight.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dagster_pomo.engine.cid import cid
from dagster_pomo.lang import Program, ast
from dagster_pomo.lang.interpret import Value
from dagster_pomo.plan.constant_defs import constant_values


@dataclass(frozen=True)
class ActionEvent:
    """What a handler receives: one distinct event and its idempotency key."""

    key: str
    handler: str
    relation: str
    args: Mapping[str, Value]
    t: int
    epoch: str

    def describe(self) -> str:
        values = ", ".join(json.dumps(v) for v in self.args.values())
        return f"{self.relation}({values}) @ t={self.t} [key {self.key[:16]}]"


Handler = Callable[[ActionEvent], object]


@dataclass(frozen=True)
class Subscription:
    """A handler listening to a relation's events that match ``equals`` (column -> constant)
    and ``same`` (groups of columns that must hold one value)."""

    handler: str
    relation: str
    equals: tuple[tuple[str, Value], ...]
    same: tuple[tuple[str, ...], ...]
    rule: ast.Rule


def subscriptions(program: Program) -> dict[str, list[Subscription]]:
    """Every handler the corpus names, with what it listens to, in source order."""
    out: dict[str, list[Subscription]] = {}
    for rule in program.corpus.rules:
        head = rule.head
        if not head.handlers:
            continue
        columns = program.catalog[head.relation].columns
        constants = constant_values(rule)
        equals: list[tuple[str, Value]] = []
        by_var: dict[str, list[str]] = {}
        for column, arg in zip(columns, head.args, strict=True):
            if isinstance(arg, ast.Const):
                equals.append((column, arg.value))
            elif isinstance(arg, ast.Var) and arg.name in constants:
                equals.append((column, constants[arg.name]))
            elif isinstance(arg, ast.Var) and rule.is_subscription:
                by_var.setdefault(arg.name, []).append(column)
        same = tuple(tuple(cols) for cols in by_var.values() if len(cols) > 1)
        for handler in head.handlers:
            sub = Subscription(handler.name, head.relation, tuple(equals), same, rule)
            out.setdefault(handler.name, []).append(sub)
    return out


def idempotency_key(handler: str, relation: str, args: Sequence[Value], t: int) -> str:
    """``handler:content ID``: stable across runs, engines and machines, the event named
    as rules name it (`engine/cid.py`), once for each handler it is handed to."""
    return f"{handler}:{cid(relation, args, t)}"


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
LEASE = 600.0  # seconds a claim holds without renewal (renewed while its batch runs)
HOST = socket.gethostname()


def new_owner() -> str:
    """Who claims: this host, this process and this call (``host:pid:token``)."""
    return f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _owner_alive(owner: str | None) -> bool:
    """Whether ``owner``'s process may still be running: a process of this host that no
    longer exists is dead; of another host, only its lease can tell."""
    if not owner:
        return False
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != HOST or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Ledger:
    """The action ledger of one corpus: a SQLite file (WAL, so readers never block)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
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

    def done(self, keys: Sequence[str]) -> set[str]:
        """Which of ``keys`` finished already."""
        found: set[str] = set()
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(
                f"SELECT key FROM actions WHERE state = 'done' AND key IN ({marks})", chunk
            )
            found.update(k for (k,) in rows)
        return found

    def claim(
        self, events: Sequence[ActionEvent], owner: str, lease: float = LEASE
    ) -> tuple[list[ActionEvent], int]:
        """Claim the events whose keys are free (new, ``failed``, or ``started`` by an
        owner that is dead or whose lease ended), in one transaction; the claimed events,
        and how many were left to a live owner."""
        now = time.time()
        claimed: list[ActionEvent] = []
        held = 0
        with self._transaction():
            keys = [e.key for e in events]
            known: dict[str, tuple[str, str | None, float | None]] = {}
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                marks = ",".join("?" * len(chunk))
                rows = self.db.execute(
                    f"SELECT key, state, owner, lease_until FROM actions WHERE key IN ({marks})",
                    chunk,
                )
                known.update((k, (st, o, lu)) for k, st, o, lu in rows)
            for event in events:
                state, holder, until = known.get(event.key, (None, None, None))
                if state == "done":
                    continue
                if state == "started" and holder != owner and (until or 0) > now:
                    if _owner_alive(holder):
                        held += 1
                        continue
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

    def _transaction(self) -> _Transaction:
        return _Transaction(self.db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *_: object) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")


@dataclass
class ActionReport:
    """What one call of :func:`run_actions` did."""

    handler: str
    ran: int = 0
    skipped: int = 0  # finished before: not handed over again
    held: int = 0  # claimed by another live run at the time: that run hands them over
    failed: list[tuple[ActionEvent, str]] = field(default_factory=list)
    seconds: float = 0.0
    emitted: int = 0  # events the handler returned, landed (see `emit`)

    def merge(self, other: ActionReport) -> None:
        self.ran += other.ran
        self.skipped += other.skipped
        self.held += other.held
        self.failed += other.failed
        self.seconds += other.seconds
        self.emitted += other.emitted


Hook = Callable[[str, ActionEvent], None]
"""Called at ``before_effect``, ``after_effect`` and ``after_ledger`` (fault injection)."""


def run_actions(
    handler: Handler,
    events: Iterable[ActionEvent],
    ledger: Ledger,
    batch: int = 256,
    hook: Hook | None = None,
    lease: float = LEASE,
    emit: Callable[[ActionEvent, object], int] | None = None,
) -> ActionReport:
    """Hand every event whose key is free (see :meth:`Ledger.claim`) to ``handler``,
    recording each in the ledger as it finishes. A handler that raises marks its event
    ``failed`` (retried next time) and the rest still run; the report lists the failures.
    Claims are taken a batch at a time and renewed while the batch runs. ``emit`` lands
    what the handler returned (`emit.Emitter`) before the event is marked done; what it
    cannot land fails the event as the handler's error would."""
    began = time.perf_counter()
    owner = new_owner()
    report: ActionReport | None = None
    for chunk in _chunks(events, batch):
        if report is None:
            report = ActionReport(chunk[0].handler)
        todo, held = ledger.claim(chunk, owner, lease)
        report.held += held
        report.skipped += len(chunk) - len(todo) - held
        renew_at = time.time() + lease / 2
        for i, event in enumerate(todo):
            try:
                if time.time() > renew_at:
                    ledger.renew([e.key for e in todo[i:]], owner, lease)
                    renew_at = time.time() + lease / 2
                if hook:
                    hook("before_effect", event)
                try:
                    returned = handler(event)
                    if emit is not None:
                        report.emitted += emit(event, returned)
                except Exception as exc:  # noqa: BLE001 - any handler error is the event's failure
                    error = "".join(traceback.format_exception_only(exc)).strip()
                    ledger.fail(event.key, error)
                    report.failed.append((event, error))
                    continue
                if hook:
                    hook("after_effect", event)
                ledger.finish([event.key])
                report.ran += 1
                if hook:
                    hook("after_ledger", event)
            except BaseException:
                ledger.release([e.key for e in todo[i:]], owner)
                raise
    report = report or ActionReport("")
    report.seconds = time.perf_counter() - began
    return report


def _chunks(events: Iterable[ActionEvent], size: int) -> Iterator[list[ActionEvent]]:
    chunk: list[ActionEvent] = []
    for event in events:
        chunk.append(event)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def check_handlers(program: Program, handlers: Mapping[str, Handler]) -> list[str]:
    """Problems between the handlers the corpus names and those registered (empty if none)."""
    named = subscriptions(program)
    problems = []
    for name, subs in named.items():
        if name not in handlers:
            rule = subs[0].rule
            where = f"{program.source.name}:{rule.span.line}:{rule.span.column}"
            problems.append(
                f"{where}: the corpus subscribes `{name}`, but no handler of that name is "
                f"registered; pass handlers={{'{name}': callable}}"
            )
    for name in handlers:
        if name not in named:
            problems.append(
                f"handler `{name}` is registered, but {program.source.name} never names it "
                f"(`{name}` after `~`); remove it or subscribe it"
            )
    return problems
