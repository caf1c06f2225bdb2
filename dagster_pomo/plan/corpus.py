"""A corpus's plan: its strata in order, each rule planned once (see `rules`).

`compile_plan` runs a short sequence of plain passes over a checked program and
its schemas, each adding one decision: the rules' plans, which recursive strata
can run their later rounds as a linear plan inside a task, which argument their
relations can be spread on, which aggregates are groupings (`one_time_groups`), and the
facts a corpus knows before any event. Every
backend executes the result; none walks the AST again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from dagster_pomo.lang import Program
from dagster_pomo.lang.check import CLOCK
from dagster_pomo.lang.source import Source
from dagster_pomo.plan.constant_defs import clocks
from dagster_pomo.plan.linear_rounds import LinearPlan, linear_plan
from dagster_pomo.plan.one_time_groups import at_one_time, one_version_each
from dagster_pomo.plan.partitioning import stable_argument
from dagster_pomo.plan.rules import RulePlan, plan_rule
from dagster_pomo.plan.schema import Schema
from dagster_pomo.plan.steps import lower
from dagster_pomo.plan.time import Lives, lives_of


@dataclass(frozen=True)
class StratumPlan:
    """One stratum: its relations, the plans of its rules with a body (``@next`` rules in
    an inductive stratum), and how a recursive one runs its rounds."""

    index: int
    relations: tuple[str, ...]
    recursive: bool
    inductive: bool
    rules: tuple[RulePlan, ...]
    linear: LinearPlan | None = None  # its later rounds as a task's plan (see `linear`)
    # Per recursive relation, the argument every rule keeps in place (see `partitioning`).
    stable: tuple[tuple[str, int | None], ...] = ()

    def own(self, relation: str) -> list[RulePlan]:
        """The rules that derive ``relation``."""
        return [r for r in self.rules if r.relation == relation]

    def one_aggregate(self, relation: str) -> bool:
        """Whether one aggregate rule alone derives ``relation`` with its head at the match
        time: it makes one version per group and time, so, with nothing else to merge (no
        facts or deferred events), its versions need no de-duplication. An explicit head
        time ``t`` is not one: every match time before ``t`` makes a version known at
        ``t``, and only the latest of them is the version of that ``(args, t, kt)``."""
        own = self.own(relation)
        return len(own) == 1 and own[0].aggregate is not None and own[0].head.time is None

    def provenance(self, schemas: Mapping[str, Schema]) -> bool:
        """Whether one of its relations carries provenance."""
        return any(schemas[n].provenance for n in self.relations)

    def cause(self, relation: str | None = None) -> RulePlan | None:
        """The rule a message about the stratum's growth points at: the first that derives
        ``relation`` (any of its relations when None) from one of the stratum's own, else
        the first that derives it."""
        own = [r for r in self.rules if relation is None or r.relation == relation]
        mine = set(self.relations)
        return next((r for r in own if any(x.relation in mine for x in r.scans)), None) or next(
            iter(own), None
        )

    @property
    def sides(self) -> tuple[str, ...]:
        """The tables its rules keep besides its relations: what each ``choose`` chose
        (`rules.Choice`)."""
        return tuple(c.table.name for r in self.rules for c in r.choices)

    @property
    def reads(self) -> set[str]:
        """Every relation its rules read, its own included."""
        return {
            x.relation for r in self.rules for x in (*r.scans, *r.negations, *r.body_aggregates)
        }


@dataclass(frozen=True)
class CorpusPlan:
    """What every backend executes of a corpus: no syntax tree, only the decisions made
    from it (the corpus's text is kept to point at in messages)."""

    name: str
    source: Source
    schemas: Mapping[str, Schema]
    strata: tuple[StratumPlan, ...]
    # Relations derived by a rule with an explicit head time: their events may be stamped
    # after the epoch that derives them, which then defers them to a later one.
    defers: frozenset[str]
    clocks: tuple[tuple[int, int], ...]  # every (offset, period) the rules read `clock` with
    has_next: bool  # whether any rule is an ``@next`` rule
    lives: Lives  # what bounds how long each relation's versions live (`time.reaches`)

    @property
    def deductive(self) -> list[StratumPlan]:
        return [s for s in self.strata if not s.inductive]

    @property
    def inductive(self) -> list[StratumPlan]:
        return [s for s in self.strata if s.inductive]

    @property
    def side_schemas(self) -> dict[str, Schema]:
        """The schemas of the tables the strata keep besides their relations (`sides`)."""
        return {c.table.name: c.table for s in self.strata for r in s.rules for c in r.choices}

    def stratum(self, index: int) -> StratumPlan:
        """The plan of the program's stratum ``index``."""
        return next(s for s in self.strata if s.index == index)


# ---------------------------------------------------------------------------- passes


def plan_strata(program: Program, schemas: Mapping[str, Schema]) -> tuple[StratumPlan, ...]:
    """Each stratum with the plans of its rules that have a body."""
    catalog = program.catalog
    return tuple(
        StratumPlan(
            s.index,
            tuple(s.relations),
            s.recursive,
            s.inductive,
            tuple(
                plan_rule(r, schemas, catalog[r.head.relation].lifetime) for r in s.rules if r.body
            ),
        )
        for s in program.strata
    )


def plan_recursion(
    program: Program, schemas: Mapping[str, Schema], strata: tuple[StratumPlan, ...]
) -> tuple[StratumPlan, ...]:
    """Recursive strata with their linear plan and their relations' stable arguments."""
    by_index = {s.index: s for s in program.strata}
    out = []
    for s in strata:
        if s.recursive:
            source = by_index[s.index]
            # A carrier's rounds merge its versions as they go (see `spark/fixpoint`): no
            # task's plan does that.
            carries = s.provenance(schemas)
            s = replace(  # noqa: PLW2901
                s,
                linear=None if carries else linear_plan(s, schemas, program.catalog),
                stable=tuple((n, stable_argument(source, n)) for n in s.relations),
            )
        out.append(s)
    return tuple(out)


def plan_aggregates(program: Program, strata: tuple[StratumPlan, ...]) -> tuple[StratumPlan, ...]:
    """Strata whose aggregates are marked where each group matches at one time, and where
    each combination of events matches in one version."""
    # Input relations and the clock: their versions are made at their time (an `@next`
    # head's relation is in a stratum though the catalog may not mark it derived).
    derived = {n for s in strata for n in s.relations}
    known = {r.name for r in program.catalog if not r.derived and r.name not in derived}
    out = []
    for s in strata:
        rules = tuple(
            replace(
                r,
                aggregate=replace(
                    r.aggregate,
                    at_one_time=at_one_time(r, known),
                    one_version_each=one_version_each(r, known),
                ),
            )
            if r.aggregate is not None
            else r
            for r in s.rules
        )
        out.append(replace(s, rules=rules))
    return tuple(out)


def plan_steps(strata: tuple[StratumPlan, ...]) -> tuple[StratumPlan, ...]:
    """Every rule lowered to the steps its executors walk (`steps.lower`), once the other
    passes have decided what the steps depend on."""
    return tuple(
        replace(s, rules=tuple(replace(r, steps=lower(r)) for r in s.rules)) for s in strata
    )


def deferring(program: Program) -> frozenset[str]:
    return frozenset(
        r.head.relation for r in program.corpus.rules if r.body and r.head.time is not None
    )


def compile_plan(program: Program, schemas: Mapping[str, Schema]) -> CorpusPlan:
    """The plan of a checked ``program`` whose relations have ``schemas``."""
    strata = plan_strata(program, schemas)
    strata = plan_recursion(program, schemas, strata)
    strata = plan_aggregates(program, strata)
    strata = plan_steps(strata)
    return CorpusPlan(
        program.name,
        program.source,
        schemas,
        strata,
        deferring(program),
        tuple(sorted(clocks(program))) if CLOCK in program.catalog else (),
        any(r.is_inductive for r in program.corpus.rules),
        lives_of(program),
    )
