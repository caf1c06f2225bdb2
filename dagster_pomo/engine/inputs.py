"""What a run reads before its first epoch: the events, their schemas, the epochs.

`prepare` is the first step of every run (``pomo run``, a Dagster asset, the benchmarks):
it reads the landing files (quarantining what is bad), adds the corpus's facts, types
every relation and lays out the epochs from the first event to the last.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dagster_pomo.engine.ingest import Ingested, corpus_facts, ingest_files, landing_files
from dagster_pomo.engine.lattices import require as require_lattices
from dagster_pomo.engine.lines import DEFAULT_TIMES, TimeWindow
from dagster_pomo.lang import Program
from dagster_pomo.plan.schema import Schema, infer_schemas
from dagster_pomo.timeline import Epoch, align_down, epochs


@dataclass(frozen=True)
class EpochRange:
    start: int
    until: int
    size: int
    epochs: list[Epoch]


def epoch_range(
    times: list[int], size: int, start: int | None = None, until: int | None = None
) -> EpochRange:
    """Epochs of ``size`` from the first event (aligned to multiples of ``size`` from time 0,
    or from ``start``) to ``until`` (default: the end of the epoch holding the last event)."""
    if not times and (start is None or until is None):
        return EpochRange(start or 0, until or 0, size, [])
    first = start if start is not None else align_down(min(times), size)
    if until is None:
        last = max(times)
        until = first + ((last - first) // size + 1) * size if last >= first else first + size
    return EpochRange(first, until, size, epochs(first, until, size))


def load_inputs(program: Program, ingested: Ingested) -> Ingested:
    """Landed events plus the corpus's facts."""
    for name, rows in corpus_facts(program).items():
        ingested.add(name, rows)
    return ingested


@dataclass(frozen=True)
class RunInputs:
    """Everything an evaluator needs before the first epoch."""

    ingested: Ingested
    schemas: dict[str, Schema]
    epoch_range: EpochRange


def prepare(
    program: Program,
    events: str | Path | None,
    size: int,
    start: int | None = None,
    until: int | None = None,
    window: TimeWindow = DEFAULT_TIMES,
) -> RunInputs:
    """The events read (times outside ``window`` quarantined), the schemas, the epochs."""
    require_lattices(program)  # before any work: a corpus merging with an unknown lattice
    landed = ingest_files(program, landing_files(events) if events else [], window)
    times = landed.times  # the run starts at the first landed event, or else the first fact
    ingested = load_inputs(program, landed)
    schemas = infer_schemas(program, ingested.types)
    return RunInputs(ingested, schemas, epoch_range(times or ingested.times, size, start, until))
