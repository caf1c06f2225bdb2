"""Events from handlers: what a handler returns lands as input events of later epochs.

A handler called for an event (see `actions`) may return events (`Emitted`, or
``{"relation", "args", "t"}`` objects, one or an iterable of them) of the corpus's input
relations, at the triggering event's time or later. They are written as one landing file
named after the triggering event's idempotency key, created once: a call repeated after
a crash (the ledger hands the event over again) finds the file there and lands nothing
more, so each triggering event's events land exactly once. The landing sensor reads the
file like any other.

A handler whose events lead back to itself would run for ever, one epoch's run after
another. Each file's name carries its *generation*: one more than the highest among the
landing files of the epochs whose events triggered it (landed events are generation 0).
Beyond `MAX_GENERATION` nothing more is landed, and the run reports the events it held
back.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagster_pomo.engine.actions import ActionEvent
from dagster_pomo.lang import Program
from dagster_pomo.lang.interpret import Value

PREFIX = "_emitted"
MAX_GENERATION = 10
_NAME = re.compile(rf"^{PREFIX}-g(\d+)-")


@dataclass(frozen=True)
class Emitted:
    """An event a handler returns: of an input relation; ``t`` None for the triggering
    event's time."""

    relation: str
    args: Sequence[Value] | Mapping[str, Value]
    t: int | None = None


class EmitError(ValueError):
    """What a handler returned is no event of the corpus: the call counts as failed."""


def generation(path: str | Path) -> int:
    """The generation of a landing file: the one in an emitted file's name, else 0."""
    found = _NAME.match(Path(path).name)
    return int(found.group(1)) if found else 0


def generation_of_epochs(files: Mapping[str, Any], start: int | None, end: int) -> int:
    """The highest generation among landing files that may hold events in ``[start, end)``
    (``files``: the landing index, file -> `ingest.Landed`)."""
    return max(
        (generation(name) for name, landed in files.items() if landed.may_hold(start, end)),
        default=0,
    )


class Emitter:
    """Lands what handlers return, in ``landing``, as events of generation ``generation``
    plus one (see the module's text)."""

    def __init__(
        self,
        program: Program,
        landing: str | Path,
        generation: int = 0,
        max_generation: int = MAX_GENERATION,
    ) -> None:
        self.program = program
        self.landing = Path(landing)
        self.generation = generation + 1
        self.max_generation = max_generation
        self.held_back = 0  # events not landed: past the last generation

    def __call__(self, event: ActionEvent, returned: object) -> int:
        """Land the events ``returned`` for ``event``; how many were landed now (0 when an
        earlier call landed them, or they are held back)."""
        lines = [self._line(event, e) for e in _items(returned)]
        if not lines:
            return 0
        if self.generation > self.max_generation:
            self.held_back += len(lines)
            return 0
        handler, _, digest = event.key.partition(":")
        name = f"{PREFIX}-g{self.generation}-{_safe(handler)}-{digest}.jsonl"
        path = self.landing / name
        if path.exists():
            return 0
        self.landing.mkdir(parents=True, exist_ok=True)
        text = "".join(line + "\n" for line in lines)
        # Written aside, then linked into place: a reader never sees half a file, and of
        # two calls racing, the first link wins and the second lands nothing.
        fd, tmp = tempfile.mkstemp(prefix=".emitting-", suffix=".tmp", dir=self.landing)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return 0
        finally:
            os.unlink(tmp)
        return len(lines)

    def _line(self, event: ActionEvent, item: object) -> str:
        if isinstance(item, Emitted):
            relation, args, t = item.relation, item.args, item.t
        elif isinstance(item, Mapping):
            relation, args, t = item.get("relation"), item.get("args", []), item.get("t")
        else:
            raise EmitError(f"a handler returned {item!r}: return Emitted(...) events or None")
        if not isinstance(relation, str) or relation not in self.program.catalog:
            raise EmitError(f"a handler emitted an event of `{relation}`: no such relation")
        rel = self.program.catalog[relation]
        if not rel.is_input:
            raise EmitError(
                f"a handler emitted an event of `{relation}`, which rules derive: emit "
                "events of input relations"
            )
        t = event.t if t is None else t
        if not isinstance(t, int) or isinstance(t, bool) or t < event.t:
            raise EmitError(
                f"a handler emitted `{relation}` at {t!r}, before the event that triggered "
                f"it (t={event.t}): an emitted event cannot change the past"
            )
        if not isinstance(args, Sequence | Mapping) or isinstance(args, str):
            raise EmitError(f"a handler emitted `{relation}` with args {args!r}: a list or dict")
        body = dict(args) if isinstance(args, Mapping) else list(args)
        return json.dumps({"relation": relation, "t": t, "args": body})


def _items(returned: object) -> Iterable[object]:
    if returned is None:
        return []
    if isinstance(returned, Emitted | Mapping):
        return [returned]
    if isinstance(returned, Iterable) and not isinstance(returned, str | bytes):
        return list(returned)
    raise EmitError(f"a handler returned {returned!r}: return Emitted(...) events or None")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:100]
