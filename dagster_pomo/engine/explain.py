"""Why an event was derived: its derivation, down to input events.

The engine keeps no provenance while it evaluates (it would cost every run for the
few events someone asks about). An explanation is found afterwards instead, from what
a run stored: a derived version remembers the time ``tau`` of the match that made it,
so the rules deriving its relation are matched again over only the versions alive at
that instant (the reference evaluator's matching, which reads the rules as
``docs/semantics.md`` states them), and the match that gives its arguments and time
is the derivation. Each matched event is explained the same way; an input event
ends the chain with the landing file and line it came from, a fact with its line in
the corpus, a clock tick as such.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dagster_pomo.engine.reference import (
    Db,
    Env,
    Match,
    ReferenceEvaluator,
    clocks,
    constant_values,
)
from dagster_pomo.engine.versions import Version
from dagster_pomo.errors import UsageError
from dagster_pomo.lang import Program, ast
from dagster_pomo.lang.check import CLOCK
from dagster_pomo.lang.interpret import Undefined, Value, evaluate
from dagster_pomo.lang.render import render_atom, render_const, render_rule
from dagster_pomo.plan.schema import Schema
from dagster_pomo.timeline import NEVER, Epoch, iter_ticks, show_time

MAX_DEPTH = 200  # premises deeper than this are left unexplained (said so)


class Store(Protocol):
    """What a run stored, read by time."""

    def around(self, relation: str, at: int) -> list[Version]:
        """The versions of ``relation`` made by ``at`` and expiring at ``at`` or later."""
        ...

    def during(self, relation: str, start: int, end: int) -> list[Version]:
        """The versions of ``relation`` made before ``end`` and expiring after ``start``."""
        ...

    def find(self, relation: str, args: Sequence[Value | None], t: int | None) -> list[Version]:
        """The versions of ``relation`` whose arguments are ``args`` (None: any) and whose
        time is ``t`` (None: any)."""
        ...


class MemoryStore:
    """Versions held in this process (a run's results, its inputs and facts)."""

    def __init__(self, versions: Mapping[str, Iterable[Version]]) -> None:
        self.versions = {name: list(rows) for name, rows in versions.items()}

    def around(self, relation: str, at: int) -> list[Version]:
        return [v for v in self.versions.get(relation, []) if v.kt <= at <= v.exp]

    def during(self, relation: str, start: int, end: int) -> list[Version]:
        return [v for v in self.versions.get(relation, []) if v.kt < end and v.exp > start]

    def find(self, relation: str, args: Sequence[Value | None], t: int | None) -> list[Version]:
        return [
            v
            for v in self.versions.get(relation, [])
            if (t is None or v.t == t) and agrees(args, v.args)
        ]


def agrees(pattern: Sequence[Value | None], values: Sequence[Value]) -> bool:
    """Whether ``values`` match ``pattern`` (None matches anything; floats within 1e-9)."""
    return len(pattern) == len(values) and all(
        p is None or equal(p, v) for p, v in zip(pattern, values, strict=True)
    )


def equal(a: Value, b: Value) -> bool:
    """Equal values; floats worked out in another order equal to 9 significant digits."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, int | float) and isinstance(b, int | float):
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return False
    return a == b


@dataclass
class Derivation:
    """One event and how it came to be: ``how`` is ``rule`` (with the rule's place and
    text, the matched events as ``premises``, the negated atoms that held as ``absent``),
    ``input`` (``source``: landing file and line, or None when no landing file holds it),
    ``fact`` (``source``: the corpus's file and line), ``clock`` or ``unexplained`` (with
    the reason in ``source``)."""

    relation: str
    args: tuple[Value, ...]
    t: int
    exp: int
    how: str
    aggregates: tuple[Value, ...] = ()
    rule: str | None = None  # "file:line"
    text: str | None = None  # the rule as written
    source: str | None = None
    premises: list[Derivation] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    note: str | None = None  # e.g. an aggregate's count of matches
    # Withdrawn (``how``): the events of the negated atoms that hold now, which a match
    # that made it before no longer passes.
    blocked: list[Derivation] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "relation": self.relation,
            "args": list(self.args),
            "t": self.t,
            "exp": None if self.exp >= NEVER else self.exp,
            "aggregates": list(self.aggregates),
            "how": self.how,
            "rule": self.rule,
            "text": self.text,
            "source": self.source,
            "note": self.note,
            "absent": list(self.absent),
            "premises": [p.to_json() for p in self.premises],
            "blocked": [b.to_json() for b in self.blocked],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Derivation:
        return cls(
            obj["relation"],
            tuple(obj["args"]),
            obj["t"],
            NEVER if obj["exp"] is None else obj["exp"],
            obj["how"],
            tuple(obj["aggregates"]),
            obj["rule"],
            obj["text"],
            obj["source"],
            [cls.from_json(p) for p in obj["premises"]],
            list(obj["absent"]),
            obj["note"],
            [cls.from_json(b) for b in obj.get("blocked", [])],
        )

    def walk(self) -> Iterator[Derivation]:
        """This derivation and every one under it, parents first."""
        yield self
        for p in self.premises:
            yield from p.walk()

    def render(self, indent: str = "", most: int = 20) -> list[str]:
        """The derivation as indented lines for people: at most ``most`` premises of an
        event (an aggregate's may be many; the JSON form has every one)."""
        args = ", ".join(_show(v) for v in self.args)
        line = f"{indent}{self.relation}({args}) at {show_time(self.t)}"
        if self.aggregates:
            line += " [" + ", ".join(_show(v) for v in self.aggregates) + "]"
        if self.how == "rule":
            line += f"  by rule {self.rule}"
        elif self.how == "input":
            line += f"  input, {self.source or 'not found in the landing files'}"
        elif self.how == "fact":
            line += f"  fact, {self.source}"
        elif self.how == "clock":
            line += "  clock tick"
        elif self.how == "withdrawn":
            line += f"  withdrawn by {self.source}" + (f", rule {self.rule}" if self.rule else "")
        else:
            line += f"  unexplained: {self.source}"
        out = [line]
        if self.text:
            out += [f"{indent}    {text.strip()}" for text in self.text.splitlines()]
        if self.note:
            out.append(f"{indent}    {self.note}")
        for absent in self.absent:
            out.append(f"{indent}    no {absent} alive then")
        for p in self.premises[:most]:
            out += p.render(indent + "  ", most)
        if len(self.premises) > most:
            out.append(f"{indent}  ... and {len(self.premises) - most} more (--json lists all)")
        if self.blocked:
            out.append(f"{indent}    but now:")
        for b in self.blocked[:most]:
            out += b.render(indent + "  ", most)
        return out


def _show(value: Value) -> str:
    if isinstance(value, str):
        return render_const(ast.Const(value, "str"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


class Explainer:
    """Explains events of ``program`` from ``store``; ``origins`` finds an input event's
    landing file and line; ``epochs`` are the run's (``@next`` rules read the one before
    the event's)."""

    def __init__(
        self,
        program: Program,
        schemas: Mapping[str, Schema],
        store: Store,
        origins: Callable[[str, tuple[Value, ...], int], str | None] = lambda *_: None,
        epochs: Sequence[Epoch] = (),
    ) -> None:
        self.program = program
        self.store = store
        self.origins = origins
        self.epochs = list(epochs)
        self.reference = ReferenceEvaluator(program, schemas)
        self.file = Path(program.source.name).name
        self.clocks = sorted(clocks(program))
        self._done: dict[tuple[str, int, tuple[Value, ...], int], Derivation] = {}
        self._read: dict[tuple[str, int, int], list[Version]] = {}

    def _around(self, relation: str, at: int) -> list[Version]:
        """The versions of ``relation`` made by ``at`` and expiring at ``at`` or later, read
        once for all the events explained at ``at``."""
        key = (relation, at, at)
        if key not in self._read:
            found = (
                [v for v in self._ticks(at - 1, at + 1) if v.kt <= at <= v.exp]
                if relation == CLOCK
                else self.store.around(relation, at)
            )
            self._read[key] = found
        return self._read[key]

    def _during(self, relation: str, start: int, end: int) -> list[Version]:
        """The versions of ``relation`` alive at some instant of ``[start, end)``, read once."""
        key = (relation, start, end - 1)
        if key not in self._read:
            found = (
                self._ticks(start, end)
                if relation == CLOCK
                else self.store.during(relation, start, end)
            )
            self._read[key] = found
        return self._read[key]

    def _ticks(self, start: int, end: int) -> list[Version]:
        """Clock ticks alive at some instant of ``[start, end)`` (none before the first
        epoch's start, as the engines make them): made here, no store keeps them."""
        first = self.epochs[0].start if self.epochs else start
        return [
            Version(t, (o, p), t, t + p)
            for o, p in self.clocks
            for t in iter_ticks(o, p, max(first, start - p), end)
            if t + p > start
        ]

    def explain(
        self, relation: str, args: Sequence[Value | None], t: int | None = None
    ) -> list[Derivation]:
        """A derivation of each stored event of ``relation`` with ``args`` (None: any) at
        ``t`` (None: any time), in time order."""
        found = self.store.find(relation, args, t)
        earliest: dict[tuple[int, tuple[Value, ...]], Version] = {}
        for v in sorted(found, key=lambda v: (v.kt, v.tau)):
            earliest.setdefault(v.identity, v)
        events = sorted(earliest.values(), key=lambda v: (v.t, v.kt))
        return [self._explain(relation, v, frozenset(), 0) for v in events]

    def why_withdrawn(
        self, relation: str, args: tuple[Value, ...], t: int, by: str, deleted: str | None
    ) -> Derivation:
        """Why the event ``relation(args)`` at ``t``, which the version of an epoch (``by``)
        withdrew, is derived no more: an input, by the delete line at ``deleted`` (or no
        line adds it now); a derived event, by the negated atom that holds now where a
        match of a rule's positive atoms still makes it (those events, and the ones that
        hold), else because no match makes it now (an event it rested on is gone)."""
        base = Derivation(relation, args, t, t, "withdrawn", source=by)
        rel = self.program.catalog[relation]
        if rel.is_input or not (rel.derived or rel.inductive):
            base.note = f"deleted by the line at {deleted}" if deleted else "no line adds it now"
            return base
        event = Version(t, args, t, t + 1)
        rules = [r for r in self.program.corpus.rules if r.head.relation == relation and r.body]
        for rule in rules:
            if rule.is_inductive or rule.aggregates or not rule.negative:
                continue
            db = self._db(rule, lambda name: self._around(name, t))
            for match in self.reference.matches(rule, db):
                tau = max((r.kt for r in match.rows), default=t)
                if not all(r.alive_at(tau) for r in match.rows):
                    continue
                if not self._same_head(rule, match, tau, event):
                    continue
                holding = [
                    a
                    for a in rule.negative
                    if not self.reference.negation_holds(a, match.env, db, (tau, tau + 1))
                ]
                if not holding:
                    continue
                base.rule = f"{self.file}:{rule.span.line}"
                base.text = self.program.rule_text(rule) or render_rule(rule)
                base.note = (
                    "its match holds as before, but "
                    + ", ".join(
                        self._absent(rule, match.env)[rule.negative.index(a)] for a in holding
                    )
                    + " now holds"
                )
                premises = _paired(rule, match)
                base.premises = [self._explain(a.relation, r, frozenset(), 1) for a, r in premises]
                base.blocked = [
                    self._explain(a.relation, r, frozenset(), 1)
                    for a in holding
                    for r in self._holding(a, match.env, db, tau)
                ]
                return base
        base.note = "no match of its rules makes it now: an event it rested on is gone"
        return base

    def _holding(self, atom: ast.Atom, env: Env, db: Db, tau: int) -> list[Version]:
        """The versions of the negated ``atom`` that agree with ``env`` and are alive at
        ``tau``: why the negation fails."""
        out = []
        for row in db.get(atom.relation, {}).values():
            try:
                if row.alive_at(tau) and self.reference.unify(atom, row, dict(env), final=True):
                    out.append(row)
            except Undefined:
                continue
        return sorted(out, key=lambda r: (r.t, r.kt))

    # ------------------------------------------------------------------ one event

    def _explain(
        self, relation: str, v: Version, path: frozenset[tuple[str, Any]], depth: int
    ) -> Derivation:
        key = (relation, v.t, v.args, v.kt)
        if key in self._done:
            return self._done[key]
        rel = self.program.catalog[relation]
        base = Derivation(relation, v.args, v.t, v.exp, "unexplained", v.aggs)
        if relation == CLOCK:
            base.how = "clock"
        elif rel.is_input or not (rel.derived or rel.inductive):
            fact = self._fact(relation, v)
            if fact is not None:
                base.how, base.source = "fact", fact
            else:
                base.how, base.source = "input", self.origins(relation, v.args, v.t)
        elif depth >= MAX_DEPTH:
            base.source = f"deeper than {MAX_DEPTH} derivations"
        else:
            fact = self._fact(relation, v)
            if fact is not None:
                base.how, base.source = "fact", fact
            else:
                self._by_rule(base, relation, v, path | {key}, depth)
        self._done[key] = base
        return base

    def _fact(self, relation: str, v: Version) -> str | None:
        """Where the corpus states ``v`` as a fact, if it does."""
        for rule in self.program.corpus.rules:
            if rule.is_fact and rule.head.relation == relation:
                try:
                    env = constant_values(rule)  # a fact's definitions are all constant
                    args, t = self.reference.head_values(rule, env, 0)
                except Undefined:
                    continue
                if t == v.t and agrees(args, v.args):
                    return f"{self.file}:{rule.span.line}"
        return None

    def _by_rule(
        self, out: Derivation, relation: str, v: Version, path: frozenset[Any], depth: int
    ) -> None:
        rules = [r for r in self.program.corpus.rules if r.head.relation == relation and r.body]
        for rule in rules:
            for premises, env, absent, note in self.matches(rule, v):
                premises += list(self._summarised(rule, env, v.tau))
                keys = [(a.relation, r.t, r.args, r.kt) for a, r in premises]
                if any(k in path for k in keys):
                    continue  # an event resting on itself: look for another derivation
                out.how = "rule"
                out.rule = f"{self.file}:{rule.span.line}"
                out.text = self.program.rule_text(rule) or render_rule(rule)
                out.absent, out.note = absent, note
                out.premises = [self._explain(a.relation, r, path, depth + 1) for a, r in premises]
                return
        out.source = "no rule matches it again from the stored events"

    def matches(
        self, rule: ast.Rule, v: Version
    ) -> Iterator[tuple[list[tuple[ast.Atom, Version]], Env, list[str], str | None]]:
        """The matches of ``rule`` that make ``v``: each with the events it matched (each
        with its atom; for an aggregate, those of every match it covers), its variables, the
        negated atoms that held, and a note."""
        reference = self.reference
        at = v.tau
        if rule.is_inductive:
            previous = next((e for e in self.epochs if e.end == at), None)
            if previous is None:
                return
            window = (previous.lower, previous.end)
            db = self._db(rule, lambda name: self._during(name, *window))
            if rule.is_async:  # the message: a match of the epoch, as of its time
                for match, tau, _ in reference.valid_matches(rule, db):
                    if window[0] <= tau < window[1] and self._same_head(rule, match, at, v):
                        yield _paired(rule, match), match.env, self._absent(rule, match.env), None
                return
            for match in reference.matches(rule, db, alive=window):
                if self._same_head(rule, match, at, v) and all(
                    reference.negation_holds(a, match.env, db, window) for a in rule.negative
                ):
                    yield _paired(rule, match), match.env, self._absent(rule, match.env), None
            return
        db = self._db(rule, lambda name: self._around(name, at))
        valid = list(reference.valid_matches(rule, db))
        if rule.aggregates:
            covered = [
                m for m, tau, exp in valid if tau <= at < exp and self._same_head(rule, m, tau, v)
            ]
            if covered:
                pairs = dict.fromkeys(p for m in covered for p in _paired(rule, m))
                note = f"an aggregate over {len(covered)} match(es) alive then"
                yield list(pairs), {}, [], note
            return
        for match, tau, _ in valid:
            if tau == at and self._same_head(rule, match, tau, v):
                yield _paired(rule, match), match.env, self._absent(rule, match.env), None

    def _db(self, rule: ast.Rule, read: Callable[[str], list[Version]]) -> Db:
        db: Db = {}
        for lit in rule.body:
            name = lit.atom.relation
            if name not in db:
                db[name] = {(r.t, r.args, r.kt): r for r in read(name)}
        return db

    def _same_head(self, rule: ast.Rule, match: Match, tau: int, v: Version) -> bool:
        """Whether ``match`` at ``tau`` makes ``v``'s head: its arguments, and its time where
        the match decides it (not for ``@next``/``@async``, stamped by the epoch, nor an
        aggregate's, whose match times are those it covers, unless ``@time`` sets it)."""
        try:
            args, t = self.reference.head_values(rule, match.env, tau)
        except Undefined:
            return False
        timed = not rule.is_inductive and (not rule.aggregates or rule.head.time is not None)
        return agrees(args, v.args) and (not timed or t == v.t)

    def _absent(self, rule: ast.Rule, env: Mapping[str, Value]) -> list[str]:
        """The negated atoms of ``rule`` with the match's values in place of variables."""
        out = []
        for atom in rule.negative:
            args = []
            for arg in atom.args:
                try:
                    args.append(
                        arg if isinstance(arg, ast.Wildcard) else _const(evaluate(arg, env))
                    )
                except (Undefined, KeyError):
                    args.append(arg)
            out.append(render_atom(ast.Atom(atom.relation, tuple(args))))
        return out

    def _summarised(self, rule: ast.Rule, env: Env, at: int) -> Iterator[tuple[ast.Atom, Version]]:
        """The events each body aggregate of ``rule`` summarised for the match with ``env``
        at ``at``: its atom's versions alive then that agree with the match."""
        if not rule.body_aggregates:
            return
        db = self._db(rule, lambda name: self._around(name, at))
        for lit in rule.body_aggregates:
            for row in db.get(lit.atom.relation, {}).values():
                local = dict(env)
                try:
                    agreed = self.reference.unify(lit.atom, row, local, final=False)
                    agreed = agreed and self.reference.unify(lit.atom, row, local, final=True)
                except Undefined:
                    continue
                if agreed and row.alive_at(at):
                    yield lit.atom, row


def _paired(rule: ast.Rule, match: Match) -> list[tuple[ast.Atom, Version]]:
    """Each positive atom of ``rule`` with the event ``match`` matched it with (a body
    aggregate's pieces, which are no events, left out)."""
    return list(zip(rule.positive, match.rows, strict=False))


def _const(value: Value) -> ast.Const:
    if isinstance(value, bool):
        return ast.Const(value, "bool")
    if isinstance(value, int):
        return ast.Const(value, "int")
    if isinstance(value, float):
        return ast.Const(value, "float")
    return ast.Const(str(value), "str")


# --------------------------------------------------------------------------- a run's events


def event_pattern(program: Program, text: str) -> tuple[str, tuple[Value | None, ...]]:
    """``relation(args)`` as a user writes an event to explain: constants, ``_`` for any
    value, attributes by name if the user likes; its relation and the values (None: any)."""
    from dagster_pomo.lang import PomoSyntaxError, parse

    try:
        corpus = parse(text.strip().rstrip(";") + ";", "<event>")
    except PomoSyntaxError as exc:
        raise UsageError(f"`{text}` is not an event: {exc}") from None
    rules = corpus.rules
    if len(rules) != 1 or rules[0].body:
        raise UsageError(f'`{text}` is not an event; write e.g. `alert("north", _)`')
    atom = rules[0].head
    if atom.relation not in program.catalog:
        raise UsageError(f"`{atom.relation}` is no relation of {program.name}")
    rel = program.catalog[atom.relation]
    given = list(atom.args)
    if atom.names is not None:  # by name: the others are any value
        given = [ast.Wildcard()] * rel.arity
        for name, arg in zip(atom.names, atom.args, strict=True):
            if name not in rel.columns:
                raise UsageError(f"`{rel.name}` has no `{name}`: {', '.join(rel.columns)}")
            given[rel.columns.index(name)] = arg
    atom = ast.Atom(rel.name, tuple(given))
    if len(atom.args) != rel.arity:
        columns = "column" if rel.arity == 1 else "columns"
        raise UsageError(f"`{rel.name}` has {rel.arity} {columns}: {', '.join(rel.columns)}")
    values: list[Value | None] = []
    for arg in atom.args:
        if isinstance(arg, ast.Wildcard):
            values.append(None)
        elif isinstance(arg, ast.Const):
            values.append(arg.value)
        else:
            raise UsageError(f"`{text}`: an event's arguments are constants or `_`")
    return rel.name, tuple(values)


def explain_run(
    result: Any, text: str, at: int | None, events: str | Path, window: Any
) -> list[Derivation]:
    """Explain the events ``text`` names (at ``at``, or any time) among what ``result``, a
    `run.RunResult`, derived from the landing files ``events`` (read again for the files
    and lines of its input events; ``window``: the times accepted)."""
    program: Program = result.program
    relation, pattern = event_pattern(program, text)
    stored: dict[str, list[Version]] = {n: list(v) for n, v in result.versions.items()}
    for name, rows in result.ingested.events.items():
        stored.setdefault(name, []).extend(rows)
    span = result.epoch_range
    schemas = _schemas(result)
    origin = landed_at(program, schemas, events, window)

    explainer = Explainer(program, schemas, MemoryStore(stored), origin, span.epochs)
    return explainer.explain(relation, pattern, at)


def landed_at(
    program: Program,
    schemas: Mapping[str, Schema],
    events: str | Path,
    window: Any,
    deletions: bool = False,
) -> Callable[[str, tuple[Value, ...], int], str | None]:
    """Where an input event was landed, ``file:line``, found in the landing files ``events``
    (read once, when first asked); with ``deletions``, where a delete line withdrew it."""
    from dagster_pomo.engine.ingest import landing_files, origins

    found: dict[tuple[str, tuple[Value, ...], int], tuple[str, int]] = {}
    read = False

    def origin(name: str, args: tuple[Value, ...], t: int) -> str | None:
        nonlocal read
        if not read:
            types = {n: s.types for n, s in schemas.items()}
            found.update(origins(program, landing_files(events), types, window, deletions))
            read = True
        place = found.get((name, args, t))
        return None if place is None else f"{place[0]}:{place[1]}"

    return origin


def _schemas(result: Any) -> Mapping[str, Schema]:
    from dagster_pomo.plan.schema import infer_schemas

    return infer_schemas(result.program, result.ingested.types)


# --------------------------------------------------------------------------- a warehouse


class WarehouseStore:
    """What a warehouse holds (a Dagster pipeline's, say), read epoch by epoch through the
    engine's `StoredResults`, filtered where it is stored."""

    def __init__(self, results: Any, keys: Sequence[str]) -> None:
        self.results = results
        self.keys = list(keys)

    def around(self, relation: str, at: int) -> list[Version]:
        return self.results.versions_where(relation, self.keys, made_by=at, expiring_from=at)

    def during(self, relation: str, start: int, end: int) -> list[Version]:
        return self.results.versions_where(
            relation, self.keys, made_by=end - 1, expiring_from=start + 1
        )

    def find(self, relation: str, args: Sequence[Value | None], t: int | None) -> list[Version]:
        found = self.results.versions_where(relation, self.keys, t=t)
        return [v for v in found if agrees(args, v.args)]


def explain_warehouse(
    program: Program,
    warehouse: str,
    size: int,
    text: str,
    at: int | None,
    events: str | Path,
    window: Any,
    settings: Any = None,
) -> list[Derivation]:
    """Explain the events ``text`` names (at ``at``, or any time) as ``warehouse`` holds them
    (epochs of ``size``, as its pipeline's partitions), with no evaluation; ``events``,
    its landing files, for the files and lines of its input events; ``settings``, Spark's."""
    from dagster_pomo.engine.driver import Driver
    from dagster_pomo.plan.schema import infer_schemas

    schemas = infer_schemas(program, {})
    relation, pattern = event_pattern(program, text)
    probe = Driver.open(program, schemas, warehouse, [], 0, settings=settings)
    starts = sorted(
        {int(k) for rel in program.catalog for k in probe.results.stored_keys(rel.name)}
    )
    if not starts:
        raise UsageError(f"{warehouse} holds nothing of {program.name}")
    epochs: list[Epoch] = []
    for start in starts:
        epochs.append(Epoch(start, start + size, epochs[-1] if epochs else None))
    keys = [str(s) for s in starts]
    store = WarehouseStore(probe.results, keys)
    origin = landed_at(program, schemas, events, window)
    explainer = Explainer(program, schemas, store, origin, epochs)
    found = explainer.explain(relation, pattern, at)
    if found:
        return found
    # Not held now: withdrawn by a new version of an epoch (see `epoch_changes`)?
    deleted = landed_at(program, schemas, events, window, deletions=True)
    gone = {}
    for args, t, key in probe.results.withdrawn(relation, keys):
        if agrees(pattern, args) and (at is None or t == at) and not store.find(relation, args, t):
            gone.setdefault((args, t), key)
    return [
        explainer.why_withdrawn(
            relation,
            args,
            t,
            f"the version of epoch {show_time(int(key))}",
            deleted(relation, args, t),
        )
        for (args, t), key in gone.items()
    ]
