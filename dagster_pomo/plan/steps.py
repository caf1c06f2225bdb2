"""A rule lowered to the typed steps every backend executes, in order.

`RulePlan` holds what was decided about a rule; `lower` turns it into the sequence its
executors walk (`engine/interpreter.py`): read each positive atom and join it to those
before it, summarise the body aggregates, add the ``where`` definitions, check expression
arguments, filter by the guards, keep the valid matches of the epoch, drop those a negated
atom is alive for, choose, carry provenance, and make the head's versions (or hand the
matches to the aggregate). The sequence and its time rules are written here once; a
backend supplies one primitive per kind of step. ``pomo plan`` prints these steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from dagster_pomo.plan import rules
from dagster_pomo.plan.band_joins import Band
from dagster_pomo.plan.exprs import Expr
from dagster_pomo.plan.rules import (
    BodyAggregate,
    Choice,
    Definition,
    Head,
    JoinKind,
    Negation,
    RulePlan,
    Scan,
)


class Window(Enum):
    """Which matches a step keeps, relative to the window ``[a, b)`` a run asks about (an
    epoch, or for an ``@next`` rule the epoch before)."""

    ALL = "all"  # every match, whenever made
    MADE = "made"  # made in the window: tau in [a, b)
    SLIDING = "sliding"  # alive at some time of it, or expired at its start: tau < b, mexp >= a


class Alive(Enum):
    """When a version of a negated atom must be alive to drop a match."""

    AT_TAU = "at tau"  # at the match's time
    IN_WINDOW = "in the window"  # at some instant of ``[a, b)`` (an ``@next`` rule)


class Stamp(Enum):
    """How a made version's times are set."""

    MATCH = "match"  # t: the head's time or tau; kt and exp by `time.head_times`
    NEXT = "next"  # at the window's end, alive one epoch more or its lifetime (`next_stamp`)


@dataclass(frozen=True)
class Read:
    """A positive atom's versions as matches: its variables' columns, ``kt``/``exp``, its
    provenance, and (``keyed``) the columns that tell its events apart."""

    scan: Scan
    keyed: bool = False


@dataclass(frozen=True)
class Join:
    """The atom just read joined to the matches before it: on shared variables, on buckets
    of a band two integer variables are kept in, or every pair."""

    kind: JoinKind
    on: tuple[str, ...] = ()
    band: Band | None = None
    index: int = 0  # the atom's


@dataclass(frozen=True)
class Summarise:
    """The body aggregates as one more atom of the match (`rules.BodyAggregate`), over the
    pieces that start in ``window``."""

    aggregates: tuple[BodyAggregate, ...]
    scans: int  # how many atoms come before: its sources follow theirs
    window: Window


@dataclass(frozen=True)
class Let:
    definition: Definition


@dataclass(frozen=True)
class Check:
    """An expression argument of atom ``scan`` equal to its column (read as ``position``)."""

    scan: int
    position: int
    expr: Expr
    column: str  # the stored column it is compared with
    type: str


@dataclass(frozen=True)
class Filter:
    guard: Expr


@dataclass(frozen=True)
class Valid:
    """Matches all of whose versions are alive at their time ``tau`` (the latest ``kt``),
    until ``mexp`` (the first ``exp``), in ``window``."""

    window: Window


@dataclass(frozen=True)
class AntiJoin:
    negation: Negation
    alive: Alive


@dataclass(frozen=True)
class Choose:
    choice: Choice
    index: int  # which of the rule's choices: what earlier epochs chose comes in this order


@dataclass(frozen=True)
class Provenance:
    """Each match's provenance: the union of its atoms' (`rules.Scan.provenance`)."""

    scans: tuple[int, ...]


@dataclass(frozen=True)
class Make:
    """The head's versions: its arguments, ``t``, ``kt``, ``exp``; a row with an undefined
    value is none. ``text``: columns the rule computes text for (`Budgets.text`)."""

    head: Head
    stamp: Stamp
    text: tuple[str, ...] = ()
    offset: int = 0  # the rule's place in its source, named when a budget is exceeded


@dataclass(frozen=True)
class Aggregate:
    """The head's aggregates over the valid matches, per group and time (the backend's
    grouping or sweep)."""

    aggregate: rules.Aggregate
    head: Head


Step = Read | Join | Summarise | Let | Check | Filter | Valid | AntiJoin | Choose | Provenance
Last = Make | Aggregate


@dataclass(frozen=True)
class Steps:
    """A rule's steps: ``body`` in order, then ``last``."""

    body: tuple[Step, ...]
    last: Last

    @property
    def window(self) -> Window:
        """Which matches the rule reads at all: a ``Valid`` step's window, else every one."""
        return next((s.window for s in self.body if isinstance(s, Valid)), Window.ALL)


def lower(rule: RulePlan) -> Steps:
    """The steps of ``rule``: a deductive rule's, an aggregate's or an ``@next`` rule's."""
    aggregate = rule.aggregate
    next_ = rule.inductive and not rule.asynchronous
    keyed = aggregate is not None and not (aggregate.one_version_each and not rule.head.provenance)
    body: list[Step] = []
    for scan in rule.scans:
        body.append(Read(scan, keyed))
        if scan.join.kind is not JoinKind.FIRST:
            body.append(Join(scan.join.kind, scan.join.on, scan.join.band, scan.index))
    window = Window.ALL if aggregate is not None or next_ else Window.MADE
    if rule.body_aggregates:
        body.append(Summarise(rule.body_aggregates, len(rule.scans), window))
    body += [Let(d) for d in rule.defs]
    body += [Check(s.index, j, e, c, t) for s in rule.scans for j, e, c, t in s.checks]
    body += [Filter(g) for g in rule.guards]
    if not next_:
        body.append(Valid(Window.SLIDING if aggregate is not None else Window.MADE))
    alive = Alive.IN_WINDOW if next_ else Alive.AT_TAU
    body += [AntiJoin(n, alive) for n in rule.negations]
    body += [Choose(c, k) for k, c in enumerate(rule.choices)]
    if rule.head.provenance:
        body.append(Provenance(tuple(s.index for s in rule.scans if s.provenance)))
    if aggregate is not None:
        return Steps(tuple(body), Aggregate(aggregate, rule.head))
    if rule.inductive:
        return Steps(tuple(body), Make(rule.head.uncapped(), Stamp.NEXT))
    text = rule.computed_text
    return Steps(tuple(body), Make(rule.head, Stamp.MATCH, text, rule.span.start))
