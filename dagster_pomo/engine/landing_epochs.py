"""Which input epochs an inputs step must store again, and how.

The landing index records, for each input epoch an inputs step stored, the landing files
that could hold its events then (with their signatures), a digest of what else decides
them (the corpus's facts and input declarations, the accepted times) and each input
relation's `digest_terms` there. At the next step an epoch is

- **kept** as stored when the files that could hold it are those, unchanged: none of them
  is read for it, and it is not written again;
- **added to** when those files are all still there, unchanged, none of them deleting an
  event of it, and new files could hold it too: its stored events with the new files'
  (their repeats dropped, their delete lines applied to both), none of the old files read
  for it;
- **read** again from every file that could hold it otherwise (a changed or removed file, a
  first store, another corpus).

A delete line withdraws its event from every file, those landed after it too, so an epoch
an old file deletes from is read again when a new file may hold it. So a late file of a
hundred readings in a day's landing reads that file and stores the epochs it holds, not
the day's file and every later epoch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagster_pomo.engine.ingest import Landed
from dagster_pomo.engine.versions import Version
from dagster_pomo.lang import Program
from dagster_pomo.timeline import Epoch, epoch_key

KEEP, ADD, READ = "keep", "add", "read"


@dataclass(frozen=True)
class EpochInputs:
    """What an input epoch was stored from: the landing files that could hold it (name ->
    signature), `inputs_digest` then, per input relation the `versions.digest_terms` of its
    rows, and how many delete lines of those files name a time in it."""

    files: Mapping[str, str]
    inputs: str
    sums: Mapping[str, tuple[int, int]]
    deletes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "files": dict(self.files),
            "inputs": self.inputs,
            "sums": {r: list(v) for r, v in self.sums.items()},
            "deletes": self.deletes,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> EpochInputs:
        sums = {r: (int(v[0]), int(v[1])) for r, v in obj["sums"].items()}
        return cls(dict(obj["files"]), str(obj["inputs"]), sums, int(obj["deletes"]))


def inputs_digest(program: Program, facts: Mapping[str, Sequence[Version]], times: str) -> str:
    """What decides an input epoch besides its landing files: the input relations'
    declarations (a lifetime sets each event's ``exp``), the corpus's facts, the times."""
    decls = [(r.name, r.columns, repr(r.decl), r.lifetime) for r in program.catalog.inputs]
    text = repr((decls, sorted((n, sorted(rows)) for n, rows in facts.items()), times))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def holders(files: Mapping[str, Landed], epoch: Epoch, first: bool) -> dict[str, str]:
    """The files of ``files`` that may hold events of ``epoch`` (the first epoch holds
    every earlier time too), with their signatures."""
    start = None if first else epoch.start
    return {f: e.signature for f, e in files.items() if e.may_hold(start, epoch.end)}


def plan_epochs(
    epochs: Sequence[Epoch],
    first: Epoch,
    now: Mapping[str, Landed],
    recorded: Mapping[str, EpochInputs],
    inputs: str,
) -> dict[str, str]:
    """For each of ``epochs``, by key, `KEEP`, `ADD` or `READ` (see the module), given what
    the landing's files hold ``now`` (the new ones' spans included) and what each epoch was
    ``recorded`` as stored from."""
    plan = {}
    for epoch in epochs:
        key = epoch_key(epoch)
        mine = holders(now, epoch, epoch == first)
        was = recorded.get(key)
        if was is None or was.inputs != inputs:
            plan[key] = READ
        elif mine == dict(was.files):
            plan[key] = KEEP
        elif not was.deletes and all(mine.get(f) == s for f, s in was.files.items()):
            plan[key] = ADD
        else:
            plan[key] = READ
    return plan


__all__ = ["ADD", "KEEP", "READ", "EpochInputs", "holders", "inputs_digest", "plan_epochs"]
