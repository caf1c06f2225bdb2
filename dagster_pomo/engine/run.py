"""One evaluation without Dagster: inputs, epochs, an evaluator, outputs.

This is what ``pomo run`` does, and the shape the Dagster layer follows per
partition: plan the epochs, evaluate them in order, merge each event's versions
for output.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster_pomo.engine.cid import cid
from dagster_pomo.engine.ingest import Ingested, landing_files
from dagster_pomo.engine.inputs import EpochRange, prepare
from dagster_pomo.engine.lines import DEFAULT_TIMES, TimeWindow
from dagster_pomo.engine.policy import DEFAULT, DRIVER_ENGINES, Policy
from dagster_pomo.engine.settings import SparkSettings
from dagster_pomo.engine.stats import PassStats
from dagster_pomo.engine.versions import (
    Version,
    event_object,
    merge_versions,
    output_order,
    value_order,
)
from dagster_pomo.errors import UsageError
from dagster_pomo.lang import Program
from dagster_pomo.lang.catalog import CLOCK
from dagster_pomo.lang.render import aggregate_key
from dagster_pomo.timeline import NEVER, epoch_key

if TYPE_CHECKING:
    from dagster_pomo.engine.driver import Driver, Progress
    from dagster_pomo.engine.stored import StoredResults

# Where a run's strata are worked out (the first is the default): the driver's engines
# (`policy.ENGINES`), and `reference`, the reference evaluator (the oracle the others are
# tested against).
ENGINES = (*DRIVER_ENGINES, "reference")


@dataclass
class RunResult:
    """What a run derived: each relation's versions, or (a run that wrote its outputs as it
    went, see `run`'s ``out``) how many events each file holds, and the versions of the
    `.check` relations only."""

    program: Program
    epoch_range: EpochRange
    ingested: Ingested
    versions: dict[str, list[Version]] = field(default_factory=dict)
    written: dict[str, int] | None = None
    passes: PassStats | None = None  # how Spark's run went: its passes, where they ran
    # With `run`'s ``changes``: per stored relation, the events added and withdrawn.
    changed: dict[str, tuple[int, int]] | None = None

    def events(self, relation: str) -> list[Version]:
        """The relation's events, one per identity, sorted by time then arguments."""
        rel = self.program.catalog[relation]
        merged = merge_versions(self.versions.get(relation, []), bool(rel.aggregates))
        return sorted(merged, key=output_order)

    @property
    def outputs(self) -> list[str]:
        """Relations with at least one rule with a body, in catalogue order."""
        return [r.name for r in self.program.catalog if r.derived or r.inductive]

    def violations(self) -> list[Violated]:
        """Each `.check` relation with its events (the violations), in catalogue order."""
        return [
            Violated(r.name, r.check, self.events(r.name))
            for r in self.program.catalog
            if r.check is not None
        ]


@dataclass(frozen=True)
class Violated:
    """A `.check` relation after a run: its severity (``"error"`` or ``"warn"``) and events."""

    relation: str
    severity: str
    events: list[Version]

    @property
    def fails(self) -> bool:
        """Whether the run fails for it: an error-level check with a violation."""
        return self.severity == "error" and bool(self.events)


def run(
    program: Program,
    events: str | Path | None,
    size: int,
    start: int | None = None,
    until: int | None = None,
    engine: str = "auto",
    warehouse: str | None = None,
    window: TimeWindow = DEFAULT_TIMES,
    policy: Policy = DEFAULT,
    out: Path | None = None,
    settings: SparkSettings | None = None,
    progress: Progress | None = None,
    changes: Path | None = None,
) -> RunResult:
    """Evaluate every epoch on ``engine`` (see `ENGINES`); versions of every derived relation
    in the result. On Spark a range of epochs runs in one pass where that stores the same (see
    `Driver.evaluate_range`) unless ``policy`` says epoch by epoch, as a schedule
    does. Events whose time lies outside ``window`` are quarantined. With ``out``, the
    outputs are written there (see `write_outputs`); on Spark straight from the
    warehouse, merged and sorted by Spark, never all in this process. ``settings``: where
    Spark runs and its configuration (default: the environment's, `SparkSettings.from_env`;
    a run that read few lines starts a new local JVM on the JIT's quick tier,
    `SparkSettings.for_lines`).
    ``progress`` is told how many of the epochs are done, ``(done, total)``: first with none
    done once the events are read, then after each pass. With ``changes``, what the run's
    stored epochs added and withdrew is written there (see `write_changes`): against what
    ``warehouse`` held before, when it is given."""
    from dagster_pomo.engine.reference import ReferenceEvaluator

    driven = engine != "reference"
    if not driven and changes is not None:
        raise UsageError("the reference evaluator keeps no warehouse: it records no changes")
    if driven:
        policy = policy.for_engine(engine)
    if driven and events is not None:
        from dagster_pomo.engine.driver import evaluated_landing, reads_landing_on_spark

        landing = landing_files(events)
        if reads_landing_on_spark(landing, policy):
            with evaluated_landing(
                program, landing, size, start, until, window, warehouse, policy, settings, progress
            ) as (driver, read):
                result = RunResult(program, read.epoch_range, read.ingested)
                _derived(result, driver, out, changes)
            return result
    prepared = prepare(program, events, size, start, until, window)
    epochs = prepared.epoch_range
    result = RunResult(program, epochs, prepared.ingested)
    if not epochs.epochs:
        if out is not None:
            write_outputs(result, out)
        if changes is not None:
            result.changed = _no_changes(program, changes)
        return result
    if driven:
        from dagster_pomo.engine.driver import evaluated

        # A session already running in this process is used as it is (`spark_session`).
        read = prepared.ingested.lines_read
        settings = (settings or SparkSettings.from_env()).for_lines(read)
        with evaluated(program, prepared, warehouse, policy, settings, progress) as driver:
            _derived(result, driver, out, changes)
        return result
    evaluator = ReferenceEvaluator(program, prepared.schemas, policy.budgets)
    if progress is not None:
        progress(0, len(epochs.epochs))
    result.versions = evaluator.run(prepared.ingested.events, epochs.epochs, epochs.start)
    if progress is not None:
        progress(len(epochs.epochs), len(epochs.epochs))
    if out is not None:
        write_outputs(result, out)
    return result


def _derived(result: RunResult, driver: Driver, out: Path | None, changes: Path | None) -> None:
    """What ``driver`` derived, into ``result``: with ``out``, the output files written
    there (by Spark where it can) and the `.check` relations' versions; else every derived
    relation's versions. With ``changes``, what its epochs changed written there."""
    program = result.program
    result.passes = driver.ran
    if changes is not None:
        keys = [epoch_key(e) for e in result.epoch_range.epochs]
        result.changed = write_changes(program, driver.results, keys, changes)
    if out is None:
        derived = [r.name for r in program.catalog if r.derived or r.inductive]
        result.versions = {name: driver.versions(name) for name in derived}
        return
    result.written = _write(result, out, driver.events, driver.write_events)
    checks = [r.name for r in program.catalog if r.check is not None]
    result.versions = {name: driver.versions(name) for name in checks}


def write_changes(
    program: Program, results: StoredResults, keys: Sequence[str], out: Path
) -> dict[str, tuple[int, int]]:
    """``out/<relation>.jsonl`` per stored relation: what the stored versions of its epochs
    ``keys`` changed, a line per event added (``"op": "insert"``) or withdrawn (``"op":
    "delete"``) with its relation, arguments, time, content ID and epoch, epoch by epoch
    (withdrawals first), then by time and arguments; how many of each per relation."""
    from dagster_pomo.engine.stored import WEIGHT

    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, tuple[int, int]] = {}
    for name in _stored(program):
        added = withdrawn = 0
        with open(_unlinked(out / f"{name}.jsonl"), "w", encoding="utf-8") as handle:
            for key in keys:
                table = results.changed_events(name, key)
                if table is None or not table.num_rows:
                    continue
                rows = [(r.pop(WEIGHT), r.pop("t"), tuple(r.values())) for r in table.to_pylist()]
                rows.sort(key=lambda r: (r[0], r[1], [value_order(v) for v in r[2]]))
                for weight, t, args in rows:
                    line = {
                        "op": "insert" if weight > 0 else "delete",
                        "relation": name,
                        "t": t,
                        "args": list(args),
                        "cid": cid(name, args, t),
                        "epoch": key,
                    }
                    handle.write(json.dumps(line) + "\n")
                    added, withdrawn = added + (weight > 0), withdrawn + (weight < 0)
        counts[name] = (added, withdrawn)
    return counts


def _no_changes(program: Program, out: Path) -> dict[str, tuple[int, int]]:
    """`write_changes` of a run with no epoch: an empty file per stored relation."""
    out.mkdir(parents=True, exist_ok=True)
    for name in _stored(program):
        _unlinked(out / f"{name}.jsonl").write_text("", encoding="utf-8")
    return dict.fromkeys(_stored(program), (0, 0))


def _stored(program: Program) -> list[str]:
    """The relations a warehouse stores, in catalogue order (not the clock)."""
    return [r.name for r in program.catalog if r.name != CLOCK]


def event_json(program: Program, relation: str, row: Version) -> dict[str, Any]:
    rel = program.catalog[relation]
    return event_object(row, [aggregate_key(a) for a in rel.aggregates], rel.provenance)


def write_outputs(result: RunResult, out: Path) -> dict[str, int]:
    """``out/<relation>.jsonl`` per output relation (one event a line, sorted by time then
    arguments) and ``out/_quarantine.jsonl``; how many events each holds. A run given
    ``out`` has written them already."""
    if result.written is None:
        result.written = _write(result, out, lambda name: iter(result.events(name)))
    return result.written


def _write(
    result: RunResult,
    out: Path,
    events: Callable[[str], Iterator[Version]],
    write_file: Callable[[str, Path, list[str]], int | None] | None = None,
) -> dict[str, int]:
    """Each output relation's file in ``out``: by ``write_file`` where it can (the engine
    writing it), else from ``events`` in this process."""
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for name in result.outputs:
        path = _unlinked(out / f"{name}.jsonl")
        keys = [aggregate_key(a) for a in result.program.catalog[name].aggregates]
        written = None if write_file is None else write_file(name, path, keys)
        if written is not None:
            counts[name] = written
            continue
        n = 0
        with open(path, "w", encoding="utf-8") as handle:
            for row in events(name):
                handle.write(json.dumps(event_json(result.program, name, row)) + "\n")
                n += 1
        counts[name] = n
    with open(_unlinked(out / "_quarantine.jsonl"), "w", encoding="utf-8") as handle:
        handle.writelines(result.ingested.quarantine_lines())
    return counts


def _unlinked(path: Path) -> Path:
    """``path``, a symbolic link there removed first: an output replaces the link with a
    file of its own, never writes through it to wherever it points."""
    if path.is_symlink():
        path.unlink()
    return path


def format_tables(result: RunResult, limit: int | None = None) -> str:
    """A readable table per output relation."""
    lines: list[str] = []
    for name in result.outputs:
        rel = result.program.catalog[name]
        rows = result.events(name)
        lines.append(f"{name} ({len(rows)} event{'s' if len(rows) != 1 else ''})")
        header = ["t", *rel.columns, *(aggregate_key(a) for a in rel.aggregates), "exp"]
        body = [
            [
                str(r.t),
                *(json.dumps(v) for v in r.args),
                *(json.dumps(v) for v in r.aggs),
                "never" if r.exp >= NEVER else str(r.exp),
            ]
            for r in (rows if limit is None else rows[:limit])
        ]
        widths = [max(len(c) for c in col) for col in zip(header, *body, strict=True)]
        for cells in (header, *body):
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))
        if limit is not None and len(rows) > limit:
            lines.append(f"  ... {len(rows) - limit} more")
        lines.append("")
    return "\n".join(lines)
