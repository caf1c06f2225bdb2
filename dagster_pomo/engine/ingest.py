"""Input events: JSON Lines landing files and the facts written in the corpus.

Each line is one event, ``{"relation": ..., "t": ..., "args": {...} | [...]}``.
A line that cannot be an event of an input relation is quarantined with its
file, line number and reason, never dropped: ``accepted + quarantined`` is
always the number of non-blank lines read.
"""

from __future__ import annotations

import json
import logging
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dagster_pomo.engine.cid import cid, normal
from dagster_pomo.engine.lines import (
    DEFAULT_TIMES,
    INT_MAX,
    INT_MIN,
    PARQUET,
    BadLine,
    Piece,
    TimeWindow,
    deletes,
    event_time,
    printable,
    read_events,
    safe,
    text_value,
)
from dagster_pomo.engine.versions import Version
from dagster_pomo.errors import UsageError
from dagster_pomo.lang import Program, ast
from dagster_pomo.lang.catalog import KIND_NAMES, Relation
from dagster_pomo.lang.check import suggest
from dagster_pomo.lang.interpret import Undefined, Value, evaluate
from dagster_pomo.plan import time as time_rules
from dagster_pomo.plan.constant_defs import constant_values
from dagster_pomo.plan.time import PYTHON_OPS
from dagster_pomo.timeline import parse_time

_log = logging.getLogger(__name__)
_warned: set[str] = set()  # links skipped that this process has warned about


@dataclass(frozen=True)
class Quarantined:
    file: str
    line: int
    reason: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "reason": self.reason, "text": self.text}

    def shown(self, what: str = "") -> str:
        """``FILE:LINE: WHAT REASON`` as a terminal or log may show it (`lines.safe`: the
        file's name and the values the reason quotes come from the landing)."""
        return f"{safe(self.file, 200)}:{self.line}: {what}{safe(self.reason)}"


@dataclass(frozen=True)
class Landed:
    """What one landing file held when it was read: enough to tell, without reading it again
    while it is unchanged, whether it has events in a span of time, and its bad lines."""

    signature: str  # size and modification time, taken before the file was read
    lines: int
    first: int | None  # the earliest and latest time of its accepted events
    last: int | None
    quarantined: tuple[Quarantined, ...] = ()

    def may_hold(self, start: int | None, end: int) -> bool:
        """Whether an accepted event's time may lie in ``[start, end)`` (no ``start``: any
        time before ``end``)."""
        if self.first is None or self.last is None:
            return False
        return self.first < end and (start is None or self.last >= start)

    def to_json(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "lines": self.lines,
            "first": self.first,
            "last": self.last,
            "quarantined": [q.to_json() for q in self.quarantined],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Landed:
        return cls(
            obj["signature"],
            obj["lines"],
            obj["first"],
            obj["last"],
            tuple(Quarantined(**q) for q in obj["quarantined"]),
        )


def file_signature(path: Path) -> str:
    """Size and modification time: a file that grows or is rewritten gets another."""
    stat = path.stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


@dataclass
class Ingested:
    """Accepted events by relation, and what was quarantined."""

    events: dict[str, list[Version]] = field(default_factory=dict)
    quarantined: list[Quarantined] = field(default_factory=list)
    lines_read: int = 0
    files: list[str] = field(default_factory=list)
    types: dict[str, tuple[str, ...]] = field(default_factory=dict)  # input column types
    landed: dict[str, Landed] = field(default_factory=dict)  # by file
    files_read: int = 0  # files read this time; the others were known unchanged
    # Read by Spark (see `engine.spark.landing`): how many events its tasks accepted (and
    # stored, not held here); every bad line, streamed in order, when `quarantined` holds
    # only the first.
    accepted_by_spark: int = 0
    bad: int | None = None
    all_quarantined: Callable[[], Iterator[Quarantined]] | None = None
    # Accepted lines that repeat an event already accepted (the same relation, arguments
    # and time once normalised): each event is kept once (see `add`).
    repeats: int = 0
    # Events withdrawn by delete lines (``"op": "delete"``, see `withdraw`): each is two
    # accepted lines, its insert and its delete.
    withdrawn: int = 0
    lines_kept: int = 0  # of `lines_read`, those of files known unchanged and not read again
    unmatched_times: list[int] = field(default_factory=list)  # of deletes that found nothing
    deleted_times: list[int] = field(default_factory=list)  # of every delete line read
    _seen: dict[str, set[tuple[int, tuple[Value, ...]]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def add(self, name: str, rows: Iterable[Version]) -> None:
        """Events of relation ``name`` kept, each identity (``t`` and arguments) once: an
        event that lands twice, or as a fact and a line, is one event (docs/semantics.md,
        "Input events"). The first copy is kept; the others are counted in `repeats`."""
        kept = self.events.setdefault(name, [])
        seen = self._seen.get(name)
        if seen is None:
            seen = self._seen[name] = {r.identity for r in kept}
        for row in rows:
            if row.identity in seen:
                self.repeats += 1
                continue
            seen.add(row.identity)
            kept.append(row)

    def quarantine_jsonl(self) -> str:
        """The quarantined lines as JSON Lines, one object with its reason a line."""
        return "".join(self.quarantine_lines())

    def quarantine_lines(self) -> Iterator[str]:
        """Each quarantined line as a JSON object with its reason, in order of file and line,
        streamed (no more held in this process than `quarantined` holds)."""
        bad = self.all_quarantined() if self.all_quarantined else iter(self.quarantined)
        return (json.dumps(q.to_json()) + "\n" for q in bad)

    @property
    def quarantined_count(self) -> int:
        """How many lines were quarantined (`quarantined` may hold only the first)."""
        return len(self.quarantined) if self.bad is None else self.bad

    @property
    def accepted(self) -> int:
        """Events accepted: landed (held here or stored by Spark) and the corpus's facts,
        an event repeated as often as it came."""
        held = sum(len(rows) for rows in self.events.values())
        return self.accepted_by_spark + held + self.repeats + 2 * self.withdrawn

    @property
    def times(self) -> list[int]:
        return [r.t for rows in self.events.values() for r in rows]


def landing_files(path: str | Path) -> list[Path]:
    """A landing file, or every ``*.jsonl``/``*.json``/``*.parquet`` file in a folder
    (sorted by name)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        kinds = (".jsonl", ".json", PARQUET)
        found = sorted(p for p in path.iterdir() if p.suffix in kinds and p.is_file())
        return [p for p in found if _inside(p, path)]
    raise UsageError(f"{path}: no such file or folder of events")


def _inside(file: Path, folder: Path) -> bool:
    """Whether ``file`` (of ``folder``'s listing) really lies in ``folder``; if not (a
    symbolic link to a file elsewhere, which would copy its lines into the quarantine), a
    warning names it and it is not read. Name such a file itself to read it."""
    if not file.is_symlink() or file.resolve().is_relative_to(folder.resolve()):
        return True
    if str(file) in _warned:
        return False
    _warned.add(str(file))
    _log.warning(
        "%s: skipped: a link to a file outside the landing folder (%s); copy it in, or "
        "name it as the events path",
        safe(str(file), 200),
        safe(str(file.resolve()), 200),
    )
    return False


def expiry(t: int, lifetime: int | None) -> int:
    """When an input event stamped ``t`` expires (`plan.time.expiry`, as every backend)."""
    return time_rules.expiry(t, lifetime, PYTHON_OPS)  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- typing values


def _kind(v: Any) -> str | None:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    return None


def coerce(value: Any, typ: str) -> Value:
    """``value`` as a value of column type ``typ``, or ``ValueError`` saying why not."""
    kind = _kind(value)
    if typ == "time":
        t = parse_time(value)
        if not INT_MIN <= t <= INT_MAX:
            raise ValueError(f"time {t} does not fit a 64-bit integer of milliseconds")
        return t
    typ = ast.stored_type(typ)  # a content ID is a string
    if typ == "float" and kind in ("int", "float"):
        return normal(float(value))
    if typ == "int" and kind == "int" and not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"got {value}, which does not fit a 64-bit integer")
    if typ == kind:
        # Events repeat a few names (tanks, users) millions of times: one copy of each.
        return sys.intern(text_value(value)) if kind == "str" else value
    shown = json.dumps(value)
    raise ValueError(f"got {shown}, {KIND_NAMES[kind]}" if kind else f"got {shown}")


def _declared_types(rel: Relation) -> tuple[str, ...] | None:
    """The column types of ``rel`` when its declaration gives every one, else None."""
    types = tuple(t for t in rel.types if t is not None)
    return types if len(types) == len(rel.types) else None


def kind_counts(
    rel: Relation, observed: Iterable[tuple[Any, ...]], into: list[Counter[str]] | None = None
) -> list[Counter[str]]:
    """Per column of ``rel``, how many of the ``observed`` values are numbers (and of them
    floats), strings or booleans (added to ``into``, when given): what `_column_types`
    decides undeclared types from."""
    counts = into if into is not None else [Counter() for _ in range(rel.arity)]
    for args in observed:
        for i, v in enumerate(args):
            if (k := _kind(v)) is not None:
                counts[i]["number" if k in ("int", "float") else k] += 1
                if k == "float":
                    counts[i]["float"] += 1
    return counts


def _column_types(program: Program, rel: Relation, counts: list[Counter[str]]) -> tuple[str, ...]:
    """Declared types, or for undeclared columns the corpus's constants, else the data's
    most common kind (``counts``, see `kind_counts`; ints widen to float when floats
    appear)."""
    if (declared := _declared_types(rel)) is not None:
        return declared
    from_corpus: dict[int, str] = {}
    for rule in program.corpus.rules:
        for atom in (rule.head, *(lit.atom for lit in rule.body)):
            if atom.relation == rel.name:
                for i, arg in enumerate(atom.args):
                    if isinstance(arg, ast.Const):
                        kind = "int" if arg.kind == "duration" else arg.kind
                        from_corpus.setdefault(i, kind)
    types: list[str] = []
    for i, declared in enumerate(rel.types):
        if declared is not None:
            types.append(declared)
        elif i in from_corpus:
            types.append(
                "float" if from_corpus[i] == "int" and counts[i]["float"] else from_corpus[i]
            )
        elif counts[i]:
            best = max(("number", "str", "bool"), key=lambda k: counts[i][k])
            types.append(("float" if counts[i]["float"] else "int") if best == "number" else best)
        else:
            types.append("str")
    return tuple(types)


def input_types(
    program: Program, counts: Mapping[str, list[Counter[str]]]
) -> dict[str, tuple[str, ...]]:
    """Each input relation's column types (see `_column_types`), from the ``counts`` of the
    values landed for those whose declarations leave some open."""
    return {
        rel.name: _column_types(
            program, rel, counts.get(rel.name) or [Counter() for _ in range(rel.arity)]
        )
        for rel in program.catalog.inputs
    }


def stored_types(types: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Column types as stored (a content ID as a string)."""
    return {name: tuple(ast.stored_type(t) for t in ts) for name, ts in types.items()}


# --------------------------------------------------------------------------- landing files


INPUTS_SHOWN = 6  # input relations a quarantine reason names, at most
NAME_SHOWN = 60  # characters of an unknown relation's name a reason repeats


def _parse_event(
    program: Program,
    obj: dict[str, Any] | BadLine,
    window: TimeWindow,
    inputs: Mapping[str, Relation] | None = None,
) -> tuple[Relation, tuple[Any, ...], int]:
    """Relation, raw args and time of one event read (see `read_events`), or ``BadLine``
    with the reason. ``inputs``: the program's input relations by name (`input_relations`),
    when the caller looks them up once for many events."""
    if isinstance(obj, BadLine):
        raise obj
    name = obj.get("relation")
    rel = (inputs or input_relations(program)).get(name) if isinstance(name, str) else None
    if rel is None:
        raise _not_an_input(program, name)
    t = event_time(obj, window)
    raw = obj.get("args", [])
    if isinstance(raw, dict) and len(raw) == rel.arity:  # the common case, at once
        try:
            return rel, tuple([raw[c] for c in rel.columns]), t
        except KeyError:
            pass  # a column missing: said below
    if isinstance(raw, dict):
        missing = [c for c in rel.columns if c not in raw]
        extra = [k for k in raw if k not in rel.columns]
        if missing or extra:
            parts = []
            if missing:
                parts.append("missing " + ", ".join(f"`{c}`" for c in missing))
            if extra:
                parts.append("unknown " + ", ".join(f"`{c[:NAME_SHOWN]}`" for c in extra[:3]))
            raise BadLine(f"`{name}` has columns {', '.join(rel.columns)}: {'; '.join(parts)}")
        args = tuple(raw[c] for c in rel.columns)
    elif isinstance(raw, list):
        if len(raw) != rel.arity:
            raise BadLine(f"`{name}` takes {rel.arity} arguments, this has {len(raw)}")
        args = tuple(raw)
    else:
        raise BadLine('"args" must be an object or a list')
    return rel, args, t


def input_relations(program: Program) -> dict[str, Relation]:
    """The relations that take input events, by name."""
    return {rel.name: rel for rel in program.catalog.inputs}


def _not_an_input(program: Program, name: object) -> BadLine:
    """Why an event of relation ``name`` cannot be accepted."""
    if not isinstance(name, str):
        return BadLine('missing "relation"')
    if name not in program.catalog or name == "clock":
        shown = name[:NAME_SHOWN] + ("..." if len(name) > NAME_SHOWN else "")
        return BadLine(f"unknown relation `{shown}`; {_inputs_hint(program, name)}")
    return BadLine(f"`{name}` is derived by rules; it does not take input events")


def _inputs_hint(program: Program, name: str) -> str:
    """What a line naming no input relation should have named."""
    inputs = [r.name for r in program.catalog.inputs]
    close = suggest(name, inputs)
    if close:
        return close
    if not inputs:
        return "the corpus takes no input events"
    shown = ", ".join(f"`{n}`" for n in inputs[:INPUTS_SHOWN])
    more = f" and {len(inputs) - INPUTS_SHOWN} more" if len(inputs) > INPUTS_SHOWN else ""
    return f"the corpus takes events of {shown}{more}"


def _check_kinds(rel: Relation, args: tuple[Any, ...]) -> None:
    """``ValueError`` naming the first value that is no number, string or boolean."""
    for col, v in zip(rel.columns, args, strict=True):
        if _kind(v) is None:
            raise ValueError(
                f"column `{col}` of `{rel.name}` must be a number, string or boolean, "
                f"got {json.dumps(v)}"
            )


def ingest_files(
    program: Program,
    paths: Iterable[Path],
    window: TimeWindow = DEFAULT_TIMES,
    prior: Mapping[str, Sequence[Version]] | None = None,
) -> Ingested:
    """Read, validate and type every line of ``paths``; events whose time lies outside
    ``window`` are quarantined. A relation whose columns are all declared is typed as its
    lines are read; the lines of one whose types the data decides wait (with their text, in
    case they turn out to be bad) until every line is read. ``prior``: events accepted
    before (stored epochs the lines add to), kept first, repeated and withdrawn by the
    lines as if read with them."""
    out = Ingested()
    for name, rows in (prior or {}).items():
        out.events[name] = list(rows)
    inputs = input_relations(program)
    declared = {
        rel.name: types
        for rel in program.catalog.inputs
        if (types := _declared_types(rel)) is not None
    }
    pending: list[tuple[str, int, str, Relation, tuple[Any, ...], int]] = []
    signatures, lines = {}, Counter[str]()
    spans: dict[str, tuple[int, int]] = {}

    deletions: list[Deletion] = []

    def accept(
        file: str, rel: Relation, values: tuple[Value, ...], t: int, deleting: Deletion | None
    ) -> None:
        # Repeats are dropped, and deletions applied, once every line is read.
        if deleting is not None:
            deletions.append(deleting)
        else:
            version = Version(t, values, t, expiry(t, rel.lifetime))
            out.events.setdefault(rel.name, []).append(version)
        spans[file] = (min(t, spans[file][0]), max(t, spans[file][1])) if file in spans else (t, t)

    for path in paths:
        file = str(path)
        out.files.append(file)
        out.files_read += 1
        signatures[file] = file_signature(path)
        for number, obj, shown in read_events(path):
            out.lines_read += 1
            lines[file] += 1
            try:
                rel, args, t = _parse_event(program, obj, window, inputs)
                deleting = deletes(obj)  # type: ignore[arg-type]
                types = declared.get(rel.name)
                if types is None:
                    _check_kinds(rel, args)  # before its values count for the types
                    pending.append((file, number, shown, rel, args, t, deleting))
                    continue
                values = _coerce_args(rel, args, types)
            except ValueError as exc:
                out.quarantined.append(_quarantined(file, number, str(exc), shown))
                continue
            gone = Deletion(file, number, shown, rel.name, values, t) if deleting else None
            accept(file, rel, values, t, gone)
    by_rel: dict[str, list[tuple[Any, ...]]] = {}
    for *_, rel, args, _t, _deleting in pending:
        by_rel.setdefault(rel.name, []).append(args)
    rels = program.catalog
    types = input_types(program, {n: kind_counts(rels[n], got) for n, got in by_rel.items()})
    out.types = stored_types(types)
    for file, number, text, rel, args, t, deleting in pending:
        try:
            values = _coerce_args(rel, args, types[rel.name])
        except ValueError as exc:
            out.quarantined.append(_quarantined(file, number, str(exc), text))
            continue
        gone = Deletion(file, number, text, rel.name, values, t) if deleting else None
        accept(file, rel, values, t, gone)
    _each_once(out)
    withdraw(out, deletions)
    out.deleted_times = [d.t for d in deletions]
    out.quarantined.sort(key=lambda q: (q.file, q.line))
    bad: dict[str, list[Quarantined]] = {}
    for q in out.quarantined:
        bad.setdefault(q.file, []).append(q)
    for file, signature in signatures.items():
        first, last = spans.get(file, (None, None))
        out.landed[file] = Landed(signature, lines[file], first, last, tuple(bad.get(file, ())))
    return out


def _each_once(out: Ingested) -> None:
    """Each relation's events read from lines kept once each, the first copy (as
    `Ingested.add` keeps them), the others counted in ``repeats``. Two copies of an event
    share its time: only events whose time another shares are compared whole, so a
    landing whose events each have a time of their own pays a sort of their times."""
    for name, rows in out.events.items():
        if len(rows) < 2:
            continue
        times = np.fromiter((r.t for r in rows), np.int64, len(rows))
        order = np.argsort(times, kind="stable")
        same = times[order][1:] == times[order][:-1]
        if not same.any():
            continue
        shared = np.zeros(len(rows), dtype=bool)
        shared[1:] |= same
        shared[:-1] |= same
        seen: set[tuple[int, tuple[Value, ...]]] = set()
        dropped = set()
        for i in np.sort(order[shared]).tolist():
            identity = rows[i].identity
            if identity in seen:
                dropped.add(i)
            else:
                seen.add(identity)
        if dropped:
            out.repeats += len(dropped)
            out.events[name] = [r for i, r in enumerate(rows) if i not in dropped]


@dataclass(frozen=True)
class Deletion:
    """A landing line that withdraws an input event (``"op": "delete"``): where it is, its
    text, and the event it names (typed)."""

    file: str
    line: int
    text: str
    relation: str
    values: tuple[Value, ...]
    t: int

    @property
    def identity(self) -> tuple[int, tuple[Value, ...]]:
        return (self.t, self.values)

    def unmatched(self) -> Quarantined:
        """The line quarantined: no line of the landing holds its event."""
        return _quarantined(self.file, self.line, NOTHING_TO_DELETE, self.text)


NOTHING_TO_DELETE = (
    "deletes an event no line of the landing holds (this relation, arguments and time): "
    "nothing to withdraw"
)


def withdraw(out: Ingested, deletions: Iterable[Deletion]) -> None:
    """The events ``deletions`` name taken out of ``out`` (docs/semantics.md, "Input
    events"): a delete line withdraws its event whichever file or line holds it, before or
    after; a repeated delete line is a repeat; one that names no event read is quarantined."""
    by_rel: dict[str, dict[tuple[int, tuple[Value, ...]], Deletion]] = {}
    for d in deletions:
        mine = by_rel.setdefault(d.relation, {})
        if d.identity in mine:
            out.repeats += 1
        else:
            mine[d.identity] = d
    for name, wanted in by_rel.items():
        rows = out.events.get(name, [])
        found = {r.identity for r in rows if r.identity in wanted}
        if found:
            out.events[name] = [r for r in rows if r.identity not in found]
            out._seen.pop(name, None)
        out.withdrawn += len(found)
        unmatched = [d for i, d in wanted.items() if i not in found]
        out.quarantined += [d.unmatched() for d in unmatched]
        out.unmatched_times += [d.t for d in unmatched]
    if by_rel:
        out.quarantined.sort(key=lambda q: (q.file, q.line))


def _quarantined(file: str, line: int, reason: str, text: str) -> Quarantined:
    """A bad line as it can be printed and stored (a lone surrogate escaped)."""
    return Quarantined(file, line, printable(reason), printable(text))


def ingest_span(
    program: Program,
    paths: Sequence[Path],
    known: Mapping[str, Landed],
    start: int | None,
    end: int,
    window: TimeWindow = DEFAULT_TIMES,
) -> Ingested:
    """Every accepted event of ``paths`` in ``[start, end)``, and more; the counts and bad
    lines of all of them. A file ``known`` unchanged to hold no event in the span is not read
    again, so a run over the latest epochs reads the latest files, not the whole history."""
    fresh, kept = to_read(paths, known, start, end)
    return with_kept(ingest_files(program, fresh, window), paths, kept)


def to_read(
    paths: Sequence[Path], known: Mapping[str, Landed], start: int | None, end: int
) -> tuple[list[Path], dict[str, Landed]]:
    """The files of ``paths`` to read for events in ``[start, end)``, and those ``known``
    unchanged to hold none there (with what they held)."""
    fresh, kept = [], {}
    for path in paths:
        entry = known.get(str(path))
        if entry is None or entry.signature != file_signature(path) or entry.may_hold(start, end):
            fresh.append(path)
        else:
            kept[str(path)] = entry
    return fresh, kept


def with_kept(out: Ingested, paths: Sequence[Path], kept: Mapping[str, Landed]) -> Ingested:
    """``out``, what was read of ``paths``, with the counts and bad lines of the files
    ``kept`` unread."""
    for file, entry in kept.items():
        out.landed[file] = entry
        out.lines_read += entry.lines
        out.lines_kept += entry.lines
        out.quarantined.extend(entry.quarantined)
    out.files = [str(p) for p in paths]
    out.quarantined.sort(key=lambda q: (q.file, q.line))
    return out


def _coerce_args(rel: Relation, args: tuple[Any, ...], types: tuple[str, ...]) -> tuple[Value, ...]:
    """``args`` as values of ``types``, or ``ValueError`` with the reason."""
    fast = _coerce_plain(args, types)
    if fast is not None:
        return fast
    _check_kinds(rel, args)
    return tuple(
        _coerce_column(rel, col, v, typ)
        for col, v, typ in zip(rel.columns, args, types, strict=True)
    )


def _coerce_plain(args: tuple[Any, ...], types: tuple[str, ...]) -> tuple[Value, ...] | None:
    """What :func:`coerce` makes of values already of their column's kind (the common case,
    a few times faster); None when one is not, or a column is a time, and ``coerce`` must
    look (and say why not)."""
    out: list[Value] = []
    for v, typ in zip(args, types, strict=True):
        kind = type(v)  # exact: a bool is no int here
        if kind is str and typ == "str" and v.isascii():
            out.append(sys.intern(v))
        elif (kind is float or kind is int) and typ == "float":
            out.append(float(v) + 0.0)  # `cid.normal`: -0.0 is 0.0
        elif (kind is int and typ == "int" and INT_MIN <= v <= INT_MAX) or (
            kind is bool and typ == "bool"
        ):
            out.append(v)
        else:
            return None
    return tuple(out)


def _coerce_column(rel: Relation, col: str, value: Any, typ: str) -> Value:
    try:
        return coerce(value, typ)
    except ValueError as exc:
        inferred = "" if rel.decl else " (inferred from the data)"
        raise ValueError(f"column `{col}` of `{rel.name}` is {typ}{inferred}: {exc}") from None


def read_piece(
    program: Program,
    piece: Piece,
    types: Mapping[str, tuple[str, ...]],
    window: TimeWindow = DEFAULT_TIMES,
) -> Iterator[tuple[Relation, tuple[Value, ...], int, int] | Deletion | Quarantined]:
    """Each line of ``piece`` as an accepted event (relation, values typed as ``types``
    says, time, line number), a `Deletion` or the `Quarantined` line: what `ingest_files`
    makes of it, once the types are known. What a Spark task reads (see
    `engine.spark.landing`)."""
    inputs = input_relations(program)
    for number, obj, shown in read_events(Path(piece.file), piece):
        try:
            rel, args, t = _parse_event(program, obj, window, inputs)
            deleting = deletes(obj)  # type: ignore[arg-type]
            values = _coerce_args(rel, args, types[rel.name])
        except ValueError as exc:
            yield _quarantined(piece.file, number, str(exc), shown)
            continue
        if deleting:
            yield Deletion(piece.file, number, shown, rel.name, values, t)
        else:
            yield rel, values, t, number


def count_kinds(
    program: Program, piece: Piece, window: TimeWindow = DEFAULT_TIMES
) -> dict[str, list[Counter[str]]]:
    """The `kind_counts` of ``piece``'s events of input relations whose declarations leave
    some column type open (the data decides those)."""
    counts: dict[str, list[Counter[str]]] = {}
    inputs = input_relations(program)
    open_types = {name for name, rel in inputs.items() if _declared_types(rel) is None}
    for _, obj, _ in read_events(Path(piece.file), piece):
        try:
            rel, args, _t = _parse_event(program, obj, window, inputs)
            deletes(obj)  # type: ignore[arg-type]  # a bad op: the line is quarantined
            if rel.name not in open_types:
                continue
            _check_kinds(rel, args)
        except ValueError:
            continue
        into = counts.get(rel.name) or counts.setdefault(rel.name, kind_counts(rel, []))
        kind_counts(rel, [args], into)
    return counts


def origins(
    program: Program,
    paths: Iterable[Path],
    types: Mapping[str, tuple[str, ...]],
    window: TimeWindow = DEFAULT_TIMES,
    deletions: bool = False,
) -> dict[tuple[str, tuple[Value, ...], int], tuple[str, int]]:
    """Where each event of the landing files ``paths`` comes from: its file and line (the
    first, for an event landed twice), by relation, typed arguments (``types``: each input
    relation's stored column types) and time; with ``deletions``, where each event a delete
    line withdraws is deleted. For explanations: one pass, read again."""
    found: dict[tuple[str, tuple[Value, ...], int], tuple[str, int]] = {}
    for path in paths:
        for event in read_piece(program, Piece(str(path)), types, window):
            if isinstance(event, Deletion) and deletions:
                found.setdefault((event.relation, event.values, event.t), (str(path), event.line))
            elif not isinstance(event, Quarantined | Deletion) and not deletions:
                rel, values, t, number = event
                found.setdefault((rel.name, values, t), (str(path), number))
    return found


# --------------------------------------------------------------------------- corpus facts


def corpus_facts(program: Program) -> dict[str, list[Version]]:
    """The corpus's facts as events: at time 0 or ``@time(c)``, typed like their columns;
    each event once, however often the corpus states it."""
    out: dict[str, list[Version]] = {}
    seen: set[tuple[str, int, tuple[Value, ...]]] = set()
    for rule in program.corpus.rules:
        if not rule.is_fact:
            continue
        rel = program.catalog[rule.head.relation]
        where = f"line {rule.span.line}, column {rule.span.column}"
        try:
            env = constant_values(rule)  # a fact's definitions are all constant
            args = tuple(evaluate(a, env) for a in rule.head.args)
            time = rule.head.time
            t = int(evaluate(time, env)) if time is not None else 0
            # Arithmetic keeps values within 64 bits (see `values`); a float time may not be.
            args = tuple(
                coerce(v, typ) if typ else normal(v) for v, typ in zip(args, rel.types, strict=True)
            )
            if not INT_MIN <= t <= INT_MAX:
                raise ValueError(f"its time {t} does not fit 64 bits of milliseconds")
        except Undefined as exc:
            raise UsageError(f"{where}: the fact has no value: {exc}") from None
        except ValueError as exc:
            raise UsageError(f"{where}: the fact cannot be stored: {exc}") from None
        if (rel.name, t, args) in seen:  # a fact stated twice is one event
            continue
        seen.add((rel.name, t, args))
        # A fact of a provenance carrier is its own source.
        prov = (cid(rel.name, args, t),) if rel.provenance else ()
        out.setdefault(rel.name, []).append(Version(t, args, t, expiry(t, rel.lifetime), prov=prov))
    return out
