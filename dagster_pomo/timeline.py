"""Times, durations and epochs: the arithmetic every evaluator shares.

Times are integer milliseconds since the Unix epoch. ``NEVER`` stands for "does
not expire" inside the engine, so that expiry is always an integer and ``min``
and ``max`` need no special cases; outputs show it as ``null``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from dagster_pomo.errors import UsageError

NEVER = 2**63 - 1
EARLIEST = -(2**63) + 1
PAST = -(2**63)  # before every time: the match time of a rule without positive atoms
_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class Epoch:
    """The half-open window ``[start, end)``; ``previous`` is the epoch before it, if any."""

    start: int
    end: int
    previous: Epoch | None = None

    def __repr__(self) -> str:
        return f"Epoch[{self.start}, {self.end})"

    @property
    def lower(self) -> int:
        """Where the epoch's matches begin: the first epoch also takes everything known before
        it (facts, events before the start), so a run produces every event before its end."""
        return self.start if self.previous is not None else EARLIEST


def epoch_slot(epoch: Epoch) -> tuple[int, int]:
    """What tells epochs apart without comparing their chains of earlier epochs: its bounds
    (a range evaluated as one starts where its first epoch does, so the start alone would
    not tell them apart)."""
    return (epoch.start, epoch.end)


def epoch_key(epoch: Epoch) -> str:
    """The name of ``epoch``'s partitions in the warehouse: its start."""
    return str(epoch.start)


def parse_duration(text: str, zero: bool = False) -> int:
    """``"1h"`` -> 3600000; a bare number is milliseconds. Positive, or 0 where ``zero``."""
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|h|d)?\s*", text)
    if not match:
        raise UsageError(f"`{text}` is not a duration; write e.g. 250ms, 30s, 10m, 1h or 1d")
    value = int(match.group(1)) * _UNITS[match.group(2) or "ms"]
    if value < 0 or (value == 0 and not zero):
        raise UsageError("a duration must be positive")
    return value


def show_duration(ms: int) -> str:
    """``ms`` in the largest unit that divides it, as a corpus would write it: 3600000 -> 1h."""
    for unit, size in sorted(_UNITS.items(), key=lambda kv: -kv[1]):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    raise AssertionError("every integer is a whole number of milliseconds")


def show_time(ms: int) -> str:
    """``ms`` as an ISO-8601 UTC time for people to read; ``never`` for ``NEVER``."""
    if ms >= NEVER:
        return "never"
    try:
        stamp = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    except OverflowError:  # beyond the years 1 to 9999
        return f"{ms} ms"
    text = stamp.isoformat(timespec="milliseconds").removesuffix("+00:00")
    return text.removesuffix(".000") + "Z"


def show_epoch(epoch: Epoch) -> str:
    """``epoch`` for people to read: ``2023-11-14T22:00:00Z..23:00`` (the end without the
    date when it is the same day)."""
    start, end = show_time(epoch.start), show_time(epoch.end)
    if start[:11] == end[:11] and "T" in end:
        end = end[11:].removesuffix(":00Z").removesuffix("Z")
    return f"{start}..{end}"


def parse_time(value: object) -> int:
    """Milliseconds from an integer or an ISO-8601 string (UTC unless it says otherwise)."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not a time")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        try:
            stamp = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"`{value}` is not an ISO-8601 time or milliseconds") from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        delta = stamp - datetime(1970, 1, 1, tzinfo=UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000 + delta.microseconds // 1_000
    raise ValueError(f"{value!r} is not a time")


def align_down(t: int, size: int) -> int:
    return (t // size) * size


def epochs(start: int, until: int, size: int) -> list[Epoch]:
    """Epochs ``[start, start+size), ...`` up to ``until``; the last may be shorter."""
    out: list[Epoch] = []
    previous: Epoch | None = None
    a = start
    while a < until:
        epoch = Epoch(a, min(a + size, until), previous)
        out.append(epoch)
        previous = epoch
        a += size
    return out


def iter_ticks(offset: int, period: int, start: int, end: int) -> Iterator[int]:
    """Times of the clock ticks alive at some instant of ``[start, end)``.

    A tick at ``t`` lives for one period, ``[t, t + period)``; the first tick is at ``offset``.
    """
    t = offset + first_tick(offset, period, start) * period
    while t < end:
        yield t
        t += period


def first_tick(offset: int, period: int, start: int) -> int:
    """The index of the first tick alive at or after ``start`` (tick ``k`` is at
    ``offset + k * period``; there are none before ``offset``)."""
    return max(0, (start - offset) // period)
