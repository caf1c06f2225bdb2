"""Landing files as numbered events (JSON Lines, or Parquet rows), strictly.

Whatever a file holds, reading it never raises: a line or row that cannot be an event
comes as a :class:`BadLine` with the reason, and the caller quarantines it. Lines end at
``\\n`` (a ``\\r`` before it is dropped, one inside a line is part of it); a byte-order
mark at the start of a file is skipped; text must be UTF-8. A Parquet file's rows are
numbered from 1 as lines are; each has the columns ``relation`` and ``t`` (milliseconds,
or a timestamp) and either ``args`` (a list or a struct) or one column per argument,
named as the relation's columns (a null one is absent: a file may hold the rows of
several relations, each leaving the others' columns null).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from dagster_pomo.timeline import parse_time, show_time

KEYS = ("relation", "t", "args", "op")  # what an event line may hold
OPS = ("insert", "delete")  # an event line's `op`: add the event (the default), withdraw it
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # an `int` column holds 64-bit integers
NUMBER_DIGITS = 30  # digits a number literal may have: more cannot be an int64 or a float


class BadLine(ValueError):
    """A line that is not an acceptable event; the message is the quarantine reason."""


@dataclass(frozen=True)
class TimeWindow:
    """The times an input event may have, ``[earliest, latest)``. An event outside is
    quarantined: a time in seconds where milliseconds were meant, or a sentinel such as
    year 9999, would otherwise stretch a run over hundreds of thousands of epochs."""

    earliest: int
    latest: int

    def check(self, t: int) -> None:
        if not self.earliest <= t < self.latest:
            hint = ""
            if self.earliest <= t * 1000 < self.latest:
                hint = " (in seconds? times are milliseconds since 1970)"
            shown = f"{t} ({show_time(t)})" if abs(t) < 2**63 - 1 else f"{str(t)[:20]}... ms"
            raise BadLine(
                f"time {shown} is outside the accepted times "
                f"{show_time(self.earliest)} to {show_time(self.latest)}{hint}; "
                "widen them with --times (pomo run) or times= (Dagster) if it is meant"
            )

    def __str__(self) -> str:
        return f"{show_time(self.earliest)}..{show_time(self.latest)}"


# Times a run can work with at all: t + a lifetime must stay a 64-bit integer.
ANY_TIME = TimeWindow(-(2**62), 2**62)
# The default: a time in seconds read as milliseconds lands in January 1970, a sentinel far
# beyond 2100.
DEFAULT_TIMES = TimeWindow(parse_time("2000-01-01T00:00:00Z"), parse_time("2100-01-01T00:00:00Z"))


def parse_window(text: str) -> TimeWindow:
    """``FROM..UNTIL`` (ISO-8601 or milliseconds, either side may be empty for "no bound"),
    or ``any``."""
    if text.strip() == "any":
        return ANY_TIME
    first, sep, last = text.partition("..")
    if not sep:
        raise ValueError(f"`{text}` is not FROM..UNTIL (e.g. 2020-01-01..2030-01-01) or `any`")
    earliest = parse_time(first) if first.strip() else ANY_TIME.earliest
    latest = parse_time(last) if last.strip() else ANY_TIME.latest
    if not ANY_TIME.earliest <= earliest < latest <= ANY_TIME.latest:
        raise ValueError(f"`{text}`: the first time must come before the second, within ±2^62 ms")
    return TimeWindow(earliest, latest)


@dataclass(frozen=True)
class Piece:
    """A part of one landing file that a task reads on its own (see `cut`): the lines that
    begin in bytes ``[start, end)`` of a JSON Lines file, or row groups ``[start, end)`` of
    a Parquet file; ``end`` None: to the end. ``before``: the newlines before ``start``
    (JSON Lines) or the rows before its first (Parquet), so that numbers are the file's."""

    file: str
    start: int = 0
    end: int | None = None
    before: int = 0


def raw_lines(path: Path, piece: Piece | None = None) -> Iterator[tuple[int, bytes]]:
    """``(number, bytes)`` for each non-blank line of ``path`` (of ``piece``), without its
    line end and a first line's byte-order mark."""
    start, end = (piece.start, piece.end) if piece is not None else (0, None)
    with open(path, "rb") as handle:
        number, position = 1, 0
        if start > 0:
            first = _first_line(handle, start)
            if first is None:
                return
            position, was_blank = first
            number = 2 + (piece.before if piece else 0) - was_blank
        while end is None or position < end:
            raw = handle.readline()
            if not raw:
                return
            position += len(raw)
            raw = raw.removesuffix(b"\n").removesuffix(b"\r")
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            number += 1
            if raw.strip():
                yield number - 1, raw


def _first_line(handle: BinaryIO, start: int) -> tuple[int, bool] | None:
    """Where the first line that begins at or after ``start`` (> 0) begins, and whether the
    line under way at ``start`` (which belongs to the piece before) was only its line end;
    None when none begins before the file ends. Leaves ``handle`` there."""
    handle.seek(start - 1)
    skipped = handle.readline()
    if not skipped.endswith(b"\n"):
        return None
    return start - 1 + len(skipped), skipped == b"\n"


def piece_bytes(path: Path, piece: Piece) -> bytes:
    """The lines of ``piece`` (those `raw_lines` gives, blank ones too) as one block, each
    ending in ``\\n`` but the last, ``\\r\\n`` read as ``\\n``, a first line's byte-order mark
    dropped; a bare ``\\r`` stays."""
    with open(path, "rb") as handle:
        begin = 0
        if piece.start > 0:
            first = _first_line(handle, piece.start)
            if first is None:
                return b""
            begin = first[0]
        handle.seek(begin)
        if piece.end is None:
            block = handle.read()
        elif begin >= piece.end:
            return b""
        else:
            block = handle.read(piece.end - begin)
            if not block.endswith(b"\n"):
                block += handle.readline()  # the last line began before `end`
    if begin == 0 and block.startswith(b"\xef\xbb\xbf"):
        block = block[3:]
    return block.replace(b"\r\n", b"\n").removesuffix(b"\n")


def newlines(path: Path, start: int, end: int) -> int:
    """How many newlines bytes ``[start, end)`` of ``path`` hold (read a few MiB at once)."""
    count = 0
    with open(path, "rb") as handle:
        handle.seek(start)
        left = end - start
        while left > 0 and (chunk := handle.read(min(left, 1 << 23))):
            count += chunk.count(b"\n")
            left -= len(chunk)
    return count


NOT_UTF8 = "not UTF-8 text (an invalid byte is shown as \\x..): write the file as UTF-8"
PARQUET = ".parquet"
ROWS_A_BATCH = 65_536  # Parquet rows read at once: memory stays flat in the file's size


def read_events(
    path: Path, piece: Piece | None = None
) -> Iterator[tuple[int, dict[str, Any] | BadLine, str]]:
    """``(number, event, shown)`` for each event of a landing file (of ``piece`` of it,
    when given): ``event`` is the line or row as an object with an event's keys (see
    `decode`), or the :class:`BadLine` to quarantine it with; ``shown`` is its text for the
    quarantine."""
    if path.suffix == PARQUET:
        yield from _parquet_events(path, piece)
        return
    for number, raw in raw_lines(path, piece):
        quick = _quick(raw)
        if quick is not None:
            yield number, quick, raw.decode("utf-8")
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            yield number, BadLine(NOT_UTF8), raw.decode("utf-8", errors="backslashreplace")
            continue
        try:
            yield number, decode(text), text
        except BadLine as exc:
            yield number, exc, text


def _parquet_events(
    path: Path, piece: Piece | None = None
) -> Iterator[tuple[int, dict[str, Any] | BadLine, str]]:
    """Each row of a Parquet landing file (of ``piece``'s row groups) as an event object
    (see the module's docstring); a file that is not Parquet is one bad row, and every row
    of a file whose columns do not say which are the arguments is bad (`_ambiguous`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        file = pq.ParquetFile(path)
        ambiguous = _ambiguous(file.schema_arrow.names)
        groups = None
        if piece is not None:
            end = file.num_row_groups if piece.end is None else piece.end
            groups = list(range(piece.start, end))
        batches = file.iter_batches(batch_size=ROWS_A_BATCH, row_groups=groups)
        number = piece.before if piece is not None else 0
        for batch in batches:
            for row in _rows(batch):
                number += 1
                if isinstance(row, BadLine):
                    yield number, row, ""
                    continue
                shown = json.dumps(row, default=_shown, ensure_ascii=False)
                try:
                    if ambiguous:
                        raise BadLine(ambiguous)
                    yield number, _row_event(row), shown
                except BadLine as exc:
                    yield number, exc, shown
    except (pa.ArrowException, OSError) as exc:
        yield 1, BadLine(f"not a Parquet file that can be read: {exc}"), path.name


def _ambiguous(names: list[str]) -> str | None:
    """Why no row of a file with these columns can be read, if none can: a name given to
    two columns (which one holds the value?), or an ``args`` column beside argument
    columns (which holds the arguments?)."""
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        return f"the file has two columns named `{repeated[0]}`: name each column once"
    others = [n for n in names if n not in KEYS]
    if "args" in names and others:
        return (
            f"the file has an `args` column and argument columns (`{others[0]}`): hold the "
            "arguments in one or the other"
        )
    return None


def _rows(batch: Any) -> Iterator[dict[str, Any] | BadLine]:
    """A batch's rows as Python objects; a row whose text is not UTF-8 (Arrow lets such
    bytes into a string column) as a `BadLine`."""
    try:
        yield from batch.to_pylist()
        return
    except UnicodeDecodeError:
        pass
    for i in range(batch.num_rows):  # only a batch holding such text is read row by row
        try:
            yield batch.slice(i, 1).to_pylist()[0]
        except UnicodeDecodeError:
            yield BadLine(NOT_UTF8)


def _shown(value: Any) -> Any:
    """A Parquet value JSON has no type for, as the quarantine shows it."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return str(value)


PIECE_BYTES = 64 << 20  # a JSON Lines file is cut in pieces of about this size (see `cut`)
PIECE_ROWS = 1 << 20  # ... and a Parquet file in pieces of whole row groups of about as many rows


def cut(path: Path, piece_bytes: int = PIECE_BYTES) -> list[Piece]:
    """``path`` as pieces that tasks read on their own, in order. A JSON Lines file's pieces
    leave ``before`` 0: the newlines before each are counted by tasks too (see `newlines`),
    then given (`numbered`). A file that cannot be read as Parquet is one piece."""
    file = str(path)
    if path.suffix == PARQUET:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            meta = pq.read_metadata(path)
        except (pa.ArrowException, OSError):
            return [Piece(file)]
        pieces, first, rows, before = [], 0, 0, 0
        for group in range(meta.num_row_groups):
            rows += meta.row_group(group).num_rows
            if rows >= PIECE_ROWS or group == meta.num_row_groups - 1:
                pieces.append(Piece(file, first, group + 1, before))
                first, before, rows = group + 1, before + rows, 0
        return pieces or [Piece(file)]
    size = path.stat().st_size
    starts = range(0, max(size, 1), piece_bytes)
    return [Piece(file, a, a + piece_bytes if a + piece_bytes < size else None) for a in starts]


def numbered(pieces: list[Piece], counts: dict[Piece, int]) -> list[Piece]:
    """The pieces of JSON Lines files with ``before`` set from the newlines each of the
    earlier pieces of its file holds (``counts``, see `newlines`)."""
    out, before, file = [], 0, None
    for piece in pieces:
        if piece.file != file:
            before, file = 0, piece.file
        if piece.file.endswith(PARQUET):
            out.append(piece)
            continue
        out.append(Piece(piece.file, piece.start, piece.end, before))
        before += counts.get(piece, 0)
    return out


def _row_event(row: dict[str, Any]) -> dict[str, Any]:
    """A Parquet row as an event object: its arguments from ``args``, else from every
    column but ``relation``, ``t`` and ``op`` that is not null."""
    t = row.get("t")
    if isinstance(t, datetime):  # a timestamp column; without a time zone, UTC
        t = t if t.tzinfo else t.replace(tzinfo=UTC)
        t = int(t.timestamp() * 1000) if t.microsecond % 1000 == 0 else t.timestamp() * 1000
    elif isinstance(t, date):  # a date column: its midnight, UTC
        t = int(datetime(t.year, t.month, t.day, tzinfo=UTC).timestamp() * 1000)
    args = row.get("args")
    if args is None:
        args = {k: v for k, v in row.items() if k not in KEYS and v is not None}
    if isinstance(args, dict):
        args = {k: _plain(v, k) for k, v in args.items()}
    elif isinstance(args, list):
        args = [_plain(v, str(i)) for i, v in enumerate(args)]
    values = args.values() if isinstance(args, dict) else args if isinstance(args, list) else ()
    for value in values:
        if isinstance(value, float) and not math.isfinite(value):
            raise BadLine(f"number `{value}` is not finite: send a finite number")
    event = {"relation": _plain(row.get("relation"), "relation"), "t": _plain(t, "t"), "args": args}
    if row.get("op") is not None:
        event["op"] = _plain(row["op"], "op")
    return event


def _plain(value: Any, column: str) -> Any:
    """A Parquet value as a line's JSON would hold it: a decimal as a number (an integer when
    it has no fraction), binary data as text when it is UTF-8; a value of another kind
    (a date, a duration, a nested list) as itself, for the checks to refuse by name."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise BadLine(f"number `{value}` (column `{column}`) is not finite")
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise BadLine(f"binary value of column `{column}` is not UTF-8 text") from None
    if value is None or isinstance(value, bool | int | float | str | list | dict):
        return value
    raise BadLine(
        f"column `{column}` holds a {type(value).__name__} ({value!s:.40}): send numbers, "
        "strings or booleans (a time as milliseconds, an ISO-8601 string or a timestamp)"
    )


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all different: a repeated key would silently lose a value."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BadLine(f"key `{key}` appears twice in one object")
        out[key] = value
    return out


def _float(text: str) -> float:
    if len(text) > NUMBER_DIGITS + 10:
        raise BadLine(f"number `{text[:20]}...` has too many digits")
    value = float(text)
    if not math.isfinite(value):
        raise BadLine(f"number `{text}` is too large for a 64-bit float")
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > NUMBER_DIGITS:
        raise BadLine(f"number `{text[:20]}...` has {len(text.lstrip('-'))} digits: too large")
    return int(text)


def _constant(name: str) -> Any:
    raise BadLine(f"{name} is not a JSON number: send a finite number")


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_float=_float, parse_int=_int, parse_constant=_constant
)


# A line's digits as b"d", its other bytes that may belong to a number as b"n", the rest as
# b" " (see `_quick`): a run of 19 digits may be an integer past 64 bits, which orjson
# reads as a float, a run of more than 40 may be a number longer than `decode` takes.
_NUMBERISH = bytes(
    ord("d") if chr(b).isdigit() and b < 128 else ord("n") if chr(b) in "+-.eE" else ord(" ")
    for b in range(256)
)
_LONG_NUMBER = b"d" * (NUMBER_DIGITS + 11)
_KEY_SET = frozenset(KEYS)
# Python's reader stops at about 1,000 levels of nesting; a shorter line cannot reach them.
QUICK_BYTES = 1_000


def long_numbers(text: bytes, digits: int = 19) -> bool:
    """Whether ``text`` holds a run of ``digits`` digits or of more than 40 bytes of a
    number: what a reader other than `decode` may read otherwise than it (see
    `_NUMBERISH`)."""
    numbers = text.translate(_NUMBERISH)
    return b"d" * digits in numbers or _LONG_NUMBER in numbers.replace(b"n", b"d")


def _quick(raw: bytes) -> dict[str, Any] | None:
    """What `decode` makes of the common line, parsed by orjson (several times faster than
    the checking decoder), or None: a line `decode` must read. orjson keeps the last of a
    repeated key, reads an integer past 64 bits as a float, takes numbers of any length and
    nests deeper than Python's reader, so it is trusted only with a line shorter than
    `QUICK_BYTES` (too short to nest that deep), of no run of 19 digits nor of more than
    40 bytes of a number (digits, signs, points, exponents) and of event keys, whose
    objects hold as many keys as the line has colons (each key has its colon: none was
    repeated, no object nested in a value) or, when text holds colons too, as many as it
    has ``":`` and no quote before white space (so each key has its ``":``)."""
    if len(raw) > QUICK_BYTES:
        return None
    if long_numbers(raw):
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict or not _KEY_SET.issuperset(obj):
        return None
    args = obj.get("args")
    keys = len(obj) + len(args) if type(args) is dict else len(obj)
    if raw.count(b":") == keys:
        return obj
    if b'" ' in raw or b'"\t' in raw or b'"\r' in raw:
        return None
    return obj if raw.count(b'":') == keys else None


def decode(text: str) -> dict[str, Any]:
    """The line as a JSON object with only the keys an event has, or :class:`BadLine`."""
    try:
        obj = _DECODER.decode(text)  # the hooks raise BadLine themselves
    except json.JSONDecodeError as exc:
        raise BadLine(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        msg = "JSON nested too deeply: an event's values are numbers, strings or booleans"
        raise BadLine(msg) from None
    if not isinstance(obj, dict):
        raise BadLine("an event must be a JSON object")
    extra = [k for k in obj if k not in KEYS]
    if extra:
        shown = ", ".join(f"`{k[:40]}`" for k in extra[:3])
        raise BadLine(f"unknown key {shown}: an event has only relation, t, args and op")
    return obj


def printable(text: str) -> str:
    """``text`` with any lone surrogate escaped, so it can be printed and written as UTF-8."""
    return text.encode("utf-8", errors="backslashreplace").decode("utf-8")


# Characters a terminal or a log viewer acts on rather than shows: controls (C0, DEL, C1),
# line and paragraph separators and the bidirectional overrides and isolates.
_UNSEEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def safe(text: str, limit: int = 300) -> str:
    """``text``, which echoes input (a relation's name, a file's, a value), as a message may
    show it: each character a terminal would act on written as an escape (``\x1b``), and
    a text longer than ``limit`` characters cut, saying how many more there were. A file
    of events cannot then move the cursor, colour the screen or write a log line of its
    own."""
    shown = _UNSEEN.sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else f"\\u{ord(m.group()):04x}"
        ),
        printable(text),
    )
    if len(shown) > limit:
        shown = f"{shown[:limit]}... ({len(shown) - limit:,} more characters)"
    return shown


def text_value(value: str) -> str:
    """``value`` if it can be stored as UTF-8; a lone surrogate (``"\\ud800"``) cannot."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = json.dumps(value)[:40]
        raise BadLine(f"text {shown} holds a lone surrogate: not Unicode text") from None
    return value


def deletes(obj: dict[str, Any]) -> bool:
    """Whether the event line withdraws its event (``"op": "delete"``) rather than adds it
    (``"insert"``, the default), or :class:`BadLine`."""
    op = obj.get("op", "insert")
    if op == "insert":
        return False
    if op == "delete":
        return True
    shown = json.dumps(op)[:40] if isinstance(op, str | int | float | bool) else type(op).__name__
    raise BadLine(f'"op" is {shown}: an event line\'s op is "insert" (the default) or "delete"')


def event_time(obj: dict[str, Any], window: TimeWindow) -> int:
    """The event's time, checked against ``window``."""
    raw = obj.get("t")
    if raw is None:
        raise BadLine('missing time "t"')
    try:
        t = parse_time(raw)
    except (ValueError, OverflowError) as exc:
        raise BadLine(f"invalid time: {exc}") from None
    window.check(t)
    return t
