"""Actions: handlers called once per distinct derived event, through a ledger.

A corpus names handlers (``pattern ~ handler;`` or ``head ~ handler := ...``);
Python code registers callables under those names. Each distinct event
``(relation, args, t)`` that a handler listens to gets an idempotency key from
the handler's name and the event. Handlers are called until they succeed, each
call with the event's stable key; a handler that records the key has
exactly-once effects. The ledger (`engine.ledger`: a SQLite file beside the warehouse,
or PostgreSQL for runs on several machines) makes it so:

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

A handler may also be told when an event it was handed is withdrawn (a recomputation no
longer derives it; see `Listener`). The ledger then keeps, per handler and event, how many
times the event was handed over and withdrawn, each under a key of its own (`insert_key`,
`withdrawal_key`): a withdrawal goes only to a handler that finished with the event, once,
and an event derived again after its withdrawal is handed over again, once.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from dagster_pomo.engine.ledger import LEASE, Ledger, idempotency_key, new_owner, open_ledger
from dagster_pomo.lang import Program, ast
from dagster_pomo.lang.interpret import Value
from dagster_pomo.plan.constant_defs import constant_values

INSERT, DELETE = "insert", "delete"


@dataclass(frozen=True)
class ActionEvent:
    """What a handler receives: one distinct event and its idempotency key; ``op`` says
    whether it is derived (``"insert"``) or withdrawn (``"delete"``, see `Listener`), and
    ``epoch`` the epoch that derived or withdrew it."""

    key: str
    handler: str
    relation: str
    args: Mapping[str, Value]
    t: int
    epoch: str
    op: str = INSERT

    def describe(self) -> str:
        values = ", ".join(json.dumps(v) for v in self.args.values())
        withdrawn = " withdrawn" if self.op == DELETE else ""
        return f"{self.relation}({values}) @ t={self.t}{withdrawn} [key {self.key[:16]}]"


Handler = Callable[[ActionEvent], object]


@dataclass(frozen=True)
class Listener:
    """A handler that is also told of withdrawals: ``inserted`` is called with each event it
    listens to, as a plain handler is; ``withdrawn`` with each of those events that a later
    recomputation no longer derives (a late event, a correction), once, after ``inserted``
    finished with it. Register it under the handler's name, as a plain callable. With
    ``inserted`` None it hears withdrawals only (the events are still recorded as handed
    over, so that their withdrawals are due): the listener of seed 004, a relation and a
    pattern (the corpus's ``pattern ~ handler;``), a callback, insertions or deletions."""

    inserted: Handler | None
    withdrawn: Handler

    def __call__(self, event: ActionEvent) -> object:
        if event.op == DELETE:
            return self.withdrawn(event)
        return None if self.inserted is None else self.inserted(event)


def hears_withdrawals(handler: Handler) -> bool:
    """Whether ``handler`` is told of withdrawals (a `Listener`)."""
    return isinstance(handler, Listener)


def insert_key(base: str, generation: int) -> str:
    """The key of the ``generation``-th time an event is handed over: its idempotency key,
    then ``<key>:2``, ``<key>:3``, ... for each time it is derived again after a withdrawal."""
    return base if generation == 1 else f"{base}:{generation}"


def withdrawal_key(base: str, generation: int) -> str:
    """The key of the withdrawal of the ``generation``-th handing over of an event:
    ``<key>:withdrawn``, then ``<key>:withdrawn:2``, ..."""
    return f"{base}:withdrawn" if generation == 1 else f"{base}:withdrawn:{generation}"


def withdrawals_done(ledger: Ledger, bases: Iterable[str]) -> dict[str, int]:
    """How many withdrawals of each event (by its idempotency key) the ledger holds as done:
    a query per generation, so usually one."""
    count = dict.fromkeys(bases, 0)
    pending = list(count)
    while pending:
        asked = {withdrawal_key(b, count[b] + 1): b for b in pending}
        pending = [asked[k] for k in ledger.done(list(asked))]
        for base in pending:
            count[base] += 1
    return count


def current(
    ledger: Ledger, inserted: list[ActionEvent], withdrawn: list[ActionEvent]
) -> list[ActionEvent]:
    """For a handler told of withdrawals: the events derived now, each keyed by the handing
    over it is due (the first, or the next after its last withdrawal), and the withdrawals
    due (an event handed over, not yet withdrawn since, and derived no longer), keyed so;
    withdrawals first, then in the order given."""
    done = withdrawals_done(ledger, [e.key for e in [*inserted, *withdrawn]])
    handed = set(ledger.done([insert_key(e.key, done[e.key] + 1) for e in withdrawn]))
    out = []
    for event in withdrawn:
        generation = done[event.key] + 1
        if insert_key(event.key, generation) in handed:
            out.append(replace(event, key=withdrawal_key(event.key, generation), op=DELETE))
    out += [replace(e, key=insert_key(e.key, done[e.key] + 1)) for e in inserted]
    return out


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
    withdrawn: int = 0  # of those that ran, withdrawals (see `Listener`)

    def merge(self, other: ActionReport) -> None:
        self.ran += other.ran
        self.withdrawn += other.withdrawn
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
                report.withdrawn += event.op == DELETE
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


__all__ = [
    "ActionEvent",
    "ActionReport",
    "DELETE",
    "Handler",
    "INSERT",
    "Listener",
    "Hook",
    "Ledger",
    "Subscription",
    "check_handlers",
    "current",
    "hears_withdrawals",
    "idempotency_key",
    "insert_key",
    "open_ledger",
    "run_actions",
    "subscriptions",
    "withdrawal_key",
    "withdrawals_done",
]
