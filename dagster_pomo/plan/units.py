"""Which strata an orchestrator runs as one step, so that its graph of steps has no cycle.

A stratum reads the relations of earlier strata in the same epoch, and an
``@next`` rule reads its body relations in the *previous* epoch. Dagster's
asset graph and Airflow's task graph must be acyclic (apart from a step's
dependency on its own previous epoch), and a step runs over its whole range of
epochs before the next step starts. So when an ``@next`` rule carries a
relation back to a stratum that fed it (``a`` from the previous ``b``, ``b``
from this epoch's ``a``), those strata become one *unit*: one step (a Dagster
multi-asset, an Airflow task) that evaluates them epoch by epoch, in stratum
order. Every other stratum is a unit of its own, and so are the relations that
only ``@next`` rules derive.
"""

from __future__ import annotations

from dataclasses import dataclass

from dagster_pomo.lang import Program, Stratum
from dagster_pomo.lang.catalog import CLOCK
from dagster_pomo.lang.stratify import strongly_connected

NEXT = "next"  # the node of relations that only `@next` rules derive


@dataclass(frozen=True)
class Unit:
    """Strata (and the ``@next``-only relations when ``carries``) materialized as one
    multi-asset. ``same_epoch`` and ``previous_epoch`` are the relations of other units
    that it reads."""

    name: str
    strata: tuple[Stratum, ...]
    carries: tuple[str, ...]
    same_epoch: frozenset[str]
    previous_epoch: frozenset[str]

    @property
    def relations(self) -> tuple[str, ...]:
        return (*self.carries, *(r for s in self.strata for r in s.relations))


def units(program: Program) -> list[Unit]:
    """The units of ``program``, upstream before downstream."""
    catalog = program.catalog
    deductive = [s for s in program.strata if not s.inductive]
    owner: dict[str, str] = {}
    for s in deductive:
        for name in s.relations:
            owner[name] = str(s.index)
    carried = [r.name for r in catalog if r.inductive and not r.derived]
    for name in carried:
        owner[name] = NEXT

    same: dict[str, set[str]] = {}  # node -> relations it reads this epoch
    previous: dict[str, set[str]] = {}  # node -> relations it reads the epoch before
    for s in deductive:
        node = str(s.index)
        same[node] = {lit.atom.relation for r in s.rules for lit in r.body} - {CLOCK}
    for rule in program.corpus.rules:
        if rule.is_inductive:
            node = owner[rule.head.relation]
            previous.setdefault(node, set()).update(
                lit.atom.relation for lit in rule.body if lit.atom.relation != CLOCK
            )

    nodes = [str(s.index) for s in deductive] + ([NEXT] if carried else [])
    succ: dict[str, list[str]] = {n: [] for n in nodes}  # node -> nodes it reads from
    for node in nodes:
        for name in same.get(node, set()) | previous.get(node, set()):
            source = owner.get(name)
            if source is not None and source != node and source not in succ[node]:
                succ[node].append(source)

    out: list[Unit] = []
    for component in strongly_connected(nodes, succ):  # sources first
        members = set(component)
        strata = tuple(s for s in deductive if str(s.index) in members)
        carries = tuple(carried) if NEXT in members else ()
        mine = {r for s in strata for r in s.relations} | set(carries)
        reads_now = set().union(*(same.get(n, set()) for n in members)) - mine
        reads_before = set().union(*(previous.get(n, set()) for n in members)) - mine
        out.append(
            Unit(
                _name(strata, carries),
                strata,
                carries,
                frozenset(reads_now),
                frozenset(reads_before),
            )
        )
    return out


def _name(strata: tuple[Stratum, ...], carries: tuple[str, ...]) -> str:
    """The unit's step name, after what it derives: ``level_10m``, ``count_and_shown``,
    ``a_and_4_more`` (relation names are identifiers; none is ``inputs``, the input
    step's name, whose asset keeps it)."""
    relations = [r for s in strata for r in s.relations] + list(carries)
    name = (
        "_and_".join(relations)
        if len(relations) <= 3
        else (f"{relations[0]}_and_{len(relations) - 1}_more")
    )
    return f"{name}_relation" if name == "inputs" else name
