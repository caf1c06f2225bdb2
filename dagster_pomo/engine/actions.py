"""Actions: handlers called once per distinct derived event, through a ledger.

A corpus names handlers (``pattern ~ handler;`` or ``head ~ handler := ...``);
Python code registers callables under those names. Each distinct event
``(relation, args, t)`` that a handler listens to gets an idempotency key from
the handler's name and the event. The ledger (SQLite, beside the warehouse)
records each key as ``started`` before the handler runs and ``done`` after:

- a ``done`` key is never handed to its handler again (retries, re-runs,
  backfills, late data re-deriving the event);
- a key left ``started`` or ``failed`` (a crash or an exception) is retried
  with the same key, so a handler that de-duplicates by key has its effect
  exactly once, and no event is left without one.

Keys are marked ``done`` in small batches: a crash loses at most a batch of
``done`` marks, and those events are handed over again with their old keys.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dagster_pomo.engine.constants import constant_values
from dagster_pomo.engine.values import Value
from dagster_pomo.lang import Program, ast


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
    """Stable across runs, machines and Python versions: a hash of the event's identity."""
    text = json.dumps([handler, relation, list(args), t], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


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
    error TEXT
);
CREATE INDEX IF NOT EXISTS actions_by_state ON actions (handler, state);
"""


class Ledger:
    """The action ledger of one corpus: a SQLite file (WAL, so readers never block)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)

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

    def start(self, events: Sequence[ActionEvent]) -> None:
        now = time.time()
        with self._transaction():
            self.db.executemany(
                "INSERT INTO actions (key, handler, relation, args, t, epoch, state, attempts,"
                " started_at) VALUES (?, ?, ?, ?, ?, ?, 'started', 1, ?)"
                " ON CONFLICT (key) DO UPDATE SET state = 'started',"
                " attempts = attempts + 1, started_at = excluded.started_at, error = NULL",
                [
                    (e.key, e.handler, e.relation, json.dumps(dict(e.args)), e.t, e.epoch, now)
                    for e in events
                ],
            )

    def finish(self, keys: Sequence[str]) -> None:
        now = time.time()
        with self._transaction():
            self.db.executemany(
                "UPDATE actions SET state = 'done', finished_at = ? WHERE key = ?",
                [(now, k) for k in keys],
            )

    def fail(self, key: str, error: str) -> None:
        with self._transaction():
            self.db.execute(
                "UPDATE actions SET state = 'failed', error = ? WHERE key = ?", (error, key)
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
    failed: list[tuple[ActionEvent, str]] = field(default_factory=list)
    seconds: float = 0.0

    def merge(self, other: ActionReport) -> None:
        self.ran += other.ran
        self.skipped += other.skipped
        self.failed += other.failed
        self.seconds += other.seconds


Hook = Callable[[str, ActionEvent], None]
"""Called at ``before_effect``, ``after_effect`` and ``after_ledger`` (fault injection)."""


def run_actions(
    handler: Handler,
    events: Iterable[ActionEvent],
    ledger: Ledger,
    batch: int = 256,
    hook: Hook | None = None,
) -> ActionReport:
    """Hand every event whose key is not ``done`` to ``handler``, recording each in the
    ledger. A handler that raises marks its event ``failed`` (retried next time) and the
    rest still run; the report lists the failures."""
    began = time.perf_counter()
    report: ActionReport | None = None
    for chunk in _chunks(events, batch):
        if report is None:
            report = ActionReport(chunk[0].handler)
        finished = ledger.done([e.key for e in chunk])
        todo = [e for e in chunk if e.key not in finished]
        report.skipped += len(chunk) - len(todo)
        if not todo:
            continue
        ledger.start(todo)
        ok: list[str] = []
        for event in todo:
            if hook:
                hook("before_effect", event)
            try:
                handler(event)
            except Exception as exc:  # noqa: BLE001 - any handler error is the event's failure
                error = "".join(traceback.format_exception_only(exc)).strip()
                ledger.fail(event.key, error)
                report.failed.append((event, error))
                continue
            if hook:
                hook("after_effect", event)
            ok.append(event.key)
        ledger.finish(ok)
        report.ran += len(ok)
        if hook:
            for event in todo:
                hook("after_ledger", event)
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
