"""Which epochs of a pipeline run a group of strata must evaluate again: those something
changed since their stored version reaches.

An epoch's evaluation reads what is known before its end and alive in it (an event that
expired matches nothing, and a negation or an aggregate looks only at what is alive), so
a new version of an epoch of a relation can change a later epoch's result only through
the events that differ between the two versions and live into that later epoch or expire
at its very start (a count that included such an event changes at that instant, and that
change is the later epoch's result). Every stored version of an epoch of a relation keeps
a `Stored` record: when it was stored, when the pass that stored it began (what it read
was stored before then, or by the same pass), the version it replaced, and the times its
difference from that version lives over. A group's epoch is evaluated again unless its
stored versions are the current plan's and every version stored since, of what it reads,
differs from the one it saw only in events that do not reach it. A late reading in the
middle of a day of ten-minute readings thus evaluates its epoch and, when what it changes
lives past the epoch's end, the next: not the rest of the day.

The events a group's epoch defers to later epochs (stamped by a head ``@time`` after the
epoch's end) are kept apart and read by those epochs as seeds: each stored version of them
keeps a record too (`deferred_name`), so a re-evaluated epoch that defers other events than
before evaluates the epochs they fall in. Where that cannot be told (a relation with no
records, a version replaced twice since, a group that carries ``@next`` results), the
epoch is evaluated: the stored results are always what evaluating every epoch stores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from dagster_pomo import __version__
from dagster_pomo.plan.corpus import CorpusPlan
from dagster_pomo.plan.text import render_plan
from dagster_pomo.timeline import Epoch, epoch_key

EVER = (-(2**63), 2**63 - 1)  # the times a first version's difference lives over: all


@dataclass(frozen=True)
class Stored:
    """One stored version of an epoch of a relation. Times are nanoseconds of this
    machine's clock; ``touches``, the smallest ``kt`` and largest ``exp`` (milliseconds)
    of the rows it holds that the version it replaced did not, or the reverse (None: the
    same rows; `EVER` for a first version)."""

    stamp: int  # when it was stored
    basis: int | None  # when the pass that stored it began (None: not known)
    plan: str  # the corpus plan it was evaluated by (`plan_digest`), "" for inputs
    previous: int | None  # the stamp of the version it replaced (None: a first version)
    previous_basis: int | None
    touches: tuple[int, int] | None

    def as_json(self) -> dict[str, object]:
        return {
            "stamp": self.stamp,
            "basis": self.basis,
            "plan": self.plan,
            "previous": self.previous,
            "previous_basis": self.previous_basis,
            "touches": list(self.touches) if self.touches is not None else None,
        }

    @classmethod
    def from_json(cls, found: Mapping[str, object]) -> Stored:
        touches = found.get("touches")
        return cls(
            int(found["stamp"]),  # type: ignore[call-overload]
            None if found.get("basis") is None else int(found["basis"]),  # type: ignore[call-overload]
            str(found.get("plan", "")),
            None if found.get("previous") is None else int(found["previous"]),  # type: ignore[call-overload]
            None if found.get("previous_basis") is None else int(found["previous_basis"]),  # type: ignore[call-overload]
            None if touches is None else (int(touches[0]), int(touches[1])),  # type: ignore[index]
        )


Records = Mapping[str, Mapping[str, Stored]]  # relation -> epoch key -> its stored version


def plan_digest(plan: CorpusPlan) -> str:
    """What a stored version was evaluated by: the corpus's plan and the engine's version
    (a changed rule, or a new release, evaluates every epoch again)."""
    schemas = sorted((n, repr(s)) for n, s in plan.schemas.items())
    text = f"{__version__}\n{render_plan(plan)}\n{schemas}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def must_evaluate(
    epoch: Epoch,
    own: Collection[str],
    reads: Collection[str],
    records: Records,
    plan: str,
) -> bool:
    """Whether ``epoch`` of the strata that store ``own`` and read ``reads`` must be
    evaluated again (see the module's docstring)."""
    key = epoch_key(epoch)
    mine = [records.get(r, {}).get(key) for r in own]
    if any(m is None or m.basis is None or m.plan != plan for m in mine):
        return True
    bases = {m.basis for m in mine if m is not None}
    if len(bases) != 1:
        return True
    (basis,) = bases
    for relation in {*own, *reads}:
        for at, version in records.get(relation, {}).items():
            if int(at) > epoch.start or _seen(version.stamp, version.basis, basis):
                continue
            if version.previous is None or not _seen(
                version.previous, version.previous_basis, basis
            ):
                return True  # a first version, or replaced twice since: not known
            if version.touches is not None:
                lo, hi = version.touches
                if lo < epoch.end and hi >= epoch.start:
                    return True  # alive in it, or expiring at its start
    return False


def deferred_name(relation: str) -> str:
    """The name the versions of the events ``relation``'s epochs defer to later ones are
    recorded by: an epoch that reads them is evaluated again as for a relation it reads."""
    return f"_deferred/{relation}"


def _seen(stamp: int, by_pass: int | None, basis: int) -> bool:
    """Whether a version stored at ``stamp`` (by a pass begun at ``by_pass``) was stored
    when a pass begun at ``basis`` read it: before, or by that pass itself."""
    return stamp < basis or by_pass == basis


__all__ = ["EVER", "Records", "Stored", "deferred_name", "must_evaluate", "plan_digest"]
