"""Content IDs: a stable digest of an event's identity (relation, arguments, time).

The same on every engine, epoch size, run and machine: the identity is written as
compact JSON (Python's shortest round-trip floats, ``ensure_ascii``) and hashed with
SHA-256; 32 hex digits (128 bits) name it. Every engine computes it with this function
(Spark through a vectorized UDF), so no second definition can drift from it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

# Spark's Python workers get this module by value (see `spark/rule_frames.py`): it imports
# nothing of the project.
Value = int | float | str | bool
CID_DIGITS = 32


def normal(value: Value) -> Value:
    """A value as an event's identity takes it: ``-0.0`` is ``0.0`` (they compare equal, so
    they are one argument, one event and one content ID). Every other value is normal once
    typed: times are milliseconds, text is decoded, arguments are positional."""
    return value + 0.0 if type(value) is float else value


def cid(relation: str, args: Sequence[Value], t: int) -> str:
    shown = [normal(v) for v in args]
    text = json.dumps([relation, shown, t], separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:CID_DIGITS]


def cids(relation: str, columns: Sequence[Iterable[Value]], times: Iterable[int]) -> list[str]:
    """The content IDs of many events of ``relation``: its argument columns (plain Python
    values, as ``Series.tolist()`` gives them) and their times."""
    return [cid(relation, list(args), int(t)) for *args, t in zip(*columns, times, strict=True)]
