"""One corpus as a scheduled pipeline, whichever orchestrator schedules it.

Where it lives (warehouse, landing folder, action ledger) and what each step of a run
does over a range of epochs: read the landing files into the inputs, evaluate a unit of
strata, hand a handler its events. The Dagster assets and the Airflow tasks are thin
wrappers around these steps, so both store the same partitions and share one ledger, with
the same keys: a team can move a corpus from one orchestrator to the other without
evaluating or acting again.
"""

from __future__ import annotations

import heapq
import json
import os
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

from dagster_pomo.engine.actions import (
    ActionEvent,
    ActionReport,
    Handler,
    current,
    hears_withdrawals,
    run_actions,
)
from dagster_pomo.engine.actions import subscriptions as handler_subscriptions
from dagster_pomo.engine.driver import Driver, PassStats, open_results
from dagster_pomo.engine.emit import Emitter, generation_of_epochs
from dagster_pomo.engine.ingest import (
    Ingested,
    Landed,
    corpus_facts,
    file_signature,
    ingest_files,
    landing_files,
    to_read,
    with_kept,
)
from dagster_pomo.engine.landing_epochs import (
    ADD,
    KEEP,
    READ,
    EpochInputs,
    holders,
    inputs_digest,
    plan_epochs,
)
from dagster_pomo.engine.ledger import Ledger, is_postgres, open_ledger
from dagster_pomo.engine.lines import DEFAULT_TIMES, BadLine, TimeWindow, event_time, read_events
from dagster_pomo.engine.policy import DEFAULT, Policy
from dagster_pomo.engine.settings import SparkSettings
from dagster_pomo.engine.versions import Version, digest_of, digest_terms
from dagster_pomo.errors import UsageError
from dagster_pomo.lang import CorpusError, Program, ast
from dagster_pomo.lang.catalog import first_use
from dagster_pomo.lang.errors import Diagnostic
from dagster_pomo.plan.corpus import CorpusPlan, compile_plan
from dagster_pomo.plan.schema import Schema, infer_schemas
from dagster_pomo.plan.units import Unit
from dagster_pomo.timeline import Epoch, epoch_key, show_epoch

LEDGER_ENV = "POMO_LEDGER"  # the action ledger's folder or PostgreSQL URL, when unset
LANDING_INDEX = "_landing.json"  # what each landing file held, beside the warehouse
Log = Callable[[str], None]


class UndeclaredInputError(CorpusError, UsageError):
    """A pipeline's input relation has no ``.decl``: its column types would come from each
    run's data, and epochs stored by different runs could disagree."""


def undeclared_input(program: Program, relation: str) -> Diagnostic | None:
    """An error at the first use of ``relation`` when it is an input with no ``.decl``, with
    the declaration to add (columns named after the variables of that use)."""
    if program.catalog[relation].decl is not None:
        return None
    first = first_use(program.corpus, relation)
    columns = [
        a.name if isinstance(a, ast.Var) and not a.name.startswith("_") else f"c{i}"
        for i, a in enumerate(first.args)
    ]
    decl = f".decl {relation}({', '.join(f'{c}: TYPE' for c in columns)});"
    return Diagnostic(
        f"`{relation}` is an input of this pipeline but has no `.decl`: every epoch is "
        "stored with the same column types, so they must be declared",
        first.name_span,
        f"add `{decl}` with each TYPE one of int, float, str, bool, time, cid",
    )


def undeclared_inputs(program: Program) -> None:
    """Raise `UndeclaredInputError` for every input relation of ``program`` with no
    ``.decl``."""
    found = [d for r in program.catalog.inputs if (d := undeclared_input(program, r.name))]
    if found:
        raise UndeclaredInputError(program.source, found)


@dataclass(frozen=True)
class Storage:
    """The warehouse root (any Spark-readable URI), the landing folder of input events, the
    action ledger (a folder of SQLite files or a PostgreSQL URL; default: ``POMO_LEDGER``,
    else beside the warehouse when it is a local path) and the times input events may have
    (``FROM..UNTIL`` or ``any``)."""

    warehouse: str
    landing: str
    ledger: str | None = None
    times: str = str(DEFAULT_TIMES)

    def window(self) -> TimeWindow:
        """The accepted times, or a ``UsageError`` saying how to write them."""
        from dagster_pomo.engine.lines import parse_window

        try:
            return parse_window(self.times)
        except ValueError as exc:
            raise UsageError(f"the accepted times {self.times!r}: {exc}") from None

    def local_folder(self, corpus: str) -> Path | None:
        """``corpus``'s folder in the warehouse when the warehouse is a local path."""
        if "://" in self.warehouse and not self.warehouse.startswith("file:"):
            return None
        return Path(self.warehouse.removeprefix("file://").removeprefix("file:")) / corpus

    def ledger_setting(self) -> str | None:
        """The ledger as set: ``ledger``, else ``POMO_LEDGER``, else ``None`` (a file beside
        the warehouse)."""
        return self.ledger or os.environ.get(LEDGER_ENV) or None

    def ledger_location(self, corpus: str) -> str:
        """Where ``corpus``'s action ledger lives: a PostgreSQL URL (``ledger``, or
        ``POMO_LEDGER`` when ``ledger`` is unset), or a SQLite file in the ``ledger``
        folder or beside the warehouse."""
        ledger = self.ledger_setting()
        if ledger is not None and is_postgres(ledger):
            return ledger
        if ledger is not None:
            return str(Path(ledger) / f"{corpus}_actions.sqlite")
        folder = self.local_folder(corpus)
        if folder is None:
            raise UsageError(
                f"the warehouse {self.warehouse} is not a local path, so the action ledger "
                "cannot live beside it: set `ledger` to a local folder or a PostgreSQL URL"
            )
        return str(folder / "_actions.sqlite")

    def open_ledger(self, corpus: str) -> Ledger:
        """``corpus``'s action ledger, opened (a schema made on first use)."""
        return open_ledger(self.ledger_location(corpus), corpus)

    def beside_ledger(self, corpus: str, name: str) -> Path:
        """A file of ``corpus``'s own state kept on this machine: beside its ledger when
        that is a file, else in the warehouse's folder of the corpus."""
        ledger = self.ledger_location(corpus)
        if is_postgres(ledger):
            folder = self.local_folder(corpus)
            if folder is None:
                raise UsageError(
                    f"the warehouse {self.warehouse} is not a local path and the ledger is "
                    f"a database: keep the warehouse on a local or mounted path to store {name}"
                )
            return folder / name
        prefix = "" if self.ledger_setting() is None else corpus
        return Path(ledger).parent / f"{prefix}{name}"

    def relation_uri(self, corpus: str, relation: str) -> str:
        """Where the warehouse keeps ``relation``: its URI (``file://`` for a local path)."""
        root = self.warehouse.rstrip("/")
        if "://" not in root:
            root = Path(root.removeprefix("file:")).resolve().as_uri()
        return f"{root}/{corpus}/{relation}"

    def stored_keys(self, corpus: str, relation: str) -> set[str]:
        """The epochs of ``relation`` the warehouse holds (one listing of its folder, through
        pyarrow's file systems: no Spark)."""
        from pyarrow import fs

        filesystem, path = fs.FileSystem.from_uri(self.relation_uri(corpus, relation))
        infos = filesystem.get_file_info(fs.FileSelector(path, allow_not_found=True))
        names = (i.base_name for i in infos if i.type == fs.FileType.Directory)
        return {n.removeprefix("epoch=") for n in names if n.startswith("epoch=")}

    def read_files(self, corpus: str) -> dict[str, str]:
        """The landing files the inputs step has read, by path, with the signature each had
        then (empty when the warehouse is not on this machine's disk or the record cannot
        be read: then every file counts as new)."""
        folder = self.local_folder(corpus)
        if folder is None:
            return {}
        try:
            record = json.loads((folder / LANDING_INDEX).read_text(encoding="utf-8"))
            return {file: entry["signature"] for file, entry in record["files"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}


def landing_index(results: Any, times: str) -> dict[str, Landed]:
    """What each landing file held (``_landing.json`` beside the warehouse), as judged with
    the accepted ``times``; empty when it was judged with others or cannot be read."""
    return _landing_json(results, times)[0]


def _landing_json(results: Any, times: str) -> tuple[dict[str, Landed], dict[str, EpochInputs]]:
    """The landing index's files and input epochs (``_landing.json``), as recorded with the
    accepted ``times``; both empty when it was judged with others or cannot be read."""
    try:
        index = json.loads(results.read_text(LANDING_INDEX) or "{}")
        if index.get("times") != times:
            return {}, {}
        files = {file: Landed.from_json(entry) for file, entry in index["files"].items()}
        epochs = index.get("epochs", {})
        return files, {key: EpochInputs.from_json(entry) for key, entry in epochs.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}, {}


def _record_epochs(
    driver: Driver,
    epochs: Sequence[Epoch],
    ingested: Ingested,
    selected: Mapping[str, list[Version]],
    written: Collection[str],
    inputs: str,
    recorded: dict[str, EpochInputs],
) -> tuple[dict[str, str], dict[str, int]]:
    """Record in ``recorded`` what each epoch of ``written`` was stored from (``selected``:
    the events stored, by relation); each input relation's digest and count over
    ``epochs``, from the records (an epoch kept as stored counted as its record says)."""
    deletes = Counter(driver.key_for(t) for t in ingested.deleted_times)
    by_key: dict[tuple[str, str | None], list[Version]] = {}
    for name, rows in selected.items():
        for r in rows:
            by_key.setdefault((name, driver.key_for(r.kt)), []).append(r)
    for e in epochs:
        if (key := epoch_key(e)) in written:
            mine = holders(ingested.landed, e, e == driver.epochs[0])
            sums = {name: digest_terms(by_key.get((name, key), [])) for name in selected}
            recorded[key] = EpochInputs(mine, inputs, sums, deletes.get(key, 0))
    digests, counts = {}, {}
    for name in selected:
        terms = [recorded[epoch_key(e)].sums.get(name, (0, 0)) for e in epochs]
        counts[name] = sum(c for c, _ in terms)
        digests[name] = digest_of(counts[name], sum(t for _, t in terms))
    return digests, counts


def _changed(path: Path, known: Mapping[str, Landed]) -> bool:
    """Whether ``path`` is new or another file since ``known`` was recorded."""
    entry = known.get(str(path))
    try:
        return entry is None or entry.signature != file_signature(path)
    except OSError:
        return True


def fresh_files(landing: str, seen: Mapping[str, str]) -> dict[Path, str]:
    """The landing files that are new or changed since ``seen`` (file name -> signature),
    with their signatures; one removed since it was listed is left out."""
    out = {}
    for path in landing_files(landing):
        try:
            signature = file_signature(path)
        except OSError:
            continue
        if seen.get(path.name) != signature:
            out[path] = signature
    return out


def event_times(path: Path, window: TimeWindow) -> list[int]:
    """The times of a landing file's readable events within ``window``. Bad lines are the
    inputs step's business (it quarantines them): whatever the file holds, this never
    raises on it, so a watcher of the landing folder moves on."""
    times = []
    for _, obj, _ in read_events(path):
        if isinstance(obj, BadLine):
            continue
        try:
            times.append(event_time(obj, window))
        except ValueError:
            continue
    return times


@dataclass
class Landing:
    """What the inputs step read of the landing files; by input relation, the digest
    (`versions.digest`) and count of the events it stored for the run's epochs; where the
    quarantined lines were written."""

    ingested: Ingested
    digests: dict[str, str]
    counts: dict[str, int]
    quarantine_file: str


@dataclass
class Acted:
    """What a handler's step did: a report per epoch key (in time order) and in all; the
    ledger's count of the handler's finished events; emitted events not landed."""

    by_epoch: dict[str, ActionReport]
    total: ActionReport
    ledger_done: int
    held_back: int = 0
    max_generation: int = 0

    def held_back_warning(self) -> str | None:
        """What to tell about emitted events not landed, or None."""
        if not self.held_back:
            return None
        return (
            f"`{self.total.handler}` returned {self.held_back} event(s) not landed: they "
            f"descend from {self.max_generation} generations of emitted events already (a "
            "loop through the handler?)"
        )

    def failure(self) -> str | None:
        """Why the step fails (some events failed: the next run retries them), or None."""
        failed = self.total.failed
        if not failed:
            return None
        shown = "\n".join(f"- {e.describe()}: {err}" for e, err in failed[:10])
        more = len(failed) - 10
        return (
            f"handler `{self.total.handler}` failed on {len(failed)} event(s); run the epoch "
            f"again to retry them (finished ones are not re-run):\n{shown}"
            + (f"\n... and {more} more" if more > 0 else "")
        )


class Pipeline:
    """A checked corpus over a `Storage`: the steps of a run over consecutive epochs (the
    epochs from the pipeline's first through the run's last: each epoch reads the one
    before)."""

    def __init__(
        self,
        program: Program,
        storage: Storage,
        schemas: Mapping[str, Schema] | None = None,
        plan: CorpusPlan | None = None,
    ) -> None:
        self.program = program
        self.storage = storage
        self.schemas = dict(schemas) if schemas is not None else infer_schemas(program, {})
        self.plan = plan or compile_plan(program, self.schemas)

    def driver(
        self,
        history: list[Epoch],
        count: int,
        policy: Policy = DEFAULT,
        settings: SparkSettings | None = None,
    ) -> tuple[Driver, list[Epoch]]:
        """A driver over ``history`` (every epoch from the first through the run's last),
        and the run's ``count`` last epochs of it, in time order."""
        driver = Driver.open(
            self.program,
            self.schemas,
            self.storage.warehouse,
            history,
            history[0].start,
            corpus_facts(self.program),
            policy=policy,
            settings=settings,
            plan=self.plan,
        )
        return driver, history[-count:]

    def land(self, driver: Driver, epochs: Sequence[Epoch]) -> Landing:
        """The inputs step: the landing files' events that fall in ``epochs`` (with the
        corpus's facts) stored as the input relations' epochs; bad lines quarantined. What
        each file held, and what each input epoch was stored from, is kept beside the
        warehouse (``_landing.json``): an epoch whose files are unchanged is kept as stored,
        one that only new files add to is its stored events with theirs, and files known
        unchanged to hold nothing of the epochs read are not read again
        (`engine.landing_epochs`). Files of more bytes than the policy's bound are read by
        Spark's tasks (`Driver.store_landing`)."""
        wh = driver.results
        window = self.storage.window()
        known, recorded = _landing_json(wh, str(window))
        start = None if epochs[0] == driver.epochs[0] else epochs[0].start
        paths = landing_files(self.storage.landing)
        fresh, kept = to_read(paths, known, start, epochs[-1].end)
        facts = corpus_facts(self.program)
        inputs = inputs_digest(self.program, facts, str(window))
        if driver.reads_on_spark(fresh):
            stored = driver.store_landing(fresh, epochs, window, facts)
            ingested = with_kept(stored.ingested, paths, kept)
            for e in epochs:  # stored from files this process did not look into
                recorded.pop(epoch_key(e), None)
            self._write_index(wh, window, ingested, recorded)
            return Landing(ingested, stored.digests, stored.counts, self._quarantine(wh, ingested))
        now = self._now(paths, known, recorded, epochs, window)
        plan = None if now is None else plan_epochs(epochs, driver.epochs[0], now, recorded, inputs)
        if now is not None and plan is not None:
            wanted = set()  # each file holding an epoch read, or newly one added to
            for e in epochs:
                mine = holders(now, e, e == driver.epochs[0])
                how = plan[epoch_key(e)]
                if how == READ:
                    wanted |= set(mine)
                elif how == ADD:
                    wanted |= set(mine) - set(recorded[epoch_key(e)].files)
            read = [p for p in paths if _changed(p, known) or str(p) in wanted]
            kept = {str(p): known[str(p)] for p in paths if p not in read}
            added = [k for k, how in plan.items() if how == ADD]
            prior = self._stored_inputs(driver, added)
            ingested = with_kept(ingest_files(self.program, read, window, prior), paths, kept)
            if any(driver.key_for(t) in added for t in ingested.unmatched_times):
                plan = None  # a delete line of a new file found nothing stored: read it all
        if plan is None:
            fresh, kept = to_read(paths, known, start, epochs[-1].end)
            ingested = with_kept(ingest_files(self.program, fresh, window), paths, kept)
            plan = {epoch_key(e): READ for e in epochs}
        for name, rows in facts.items():
            ingested.add(name, rows)
        written = {k for k, how in plan.items() if how != KEEP}
        selected = {
            rel.name: [
                e for e in ingested.events.get(rel.name, []) if driver.key_for(e.kt) in written
            ]
            for rel in self.program.catalog.inputs
        }
        driver.write_inputs(selected, written)
        digests, counts = _record_epochs(
            driver, epochs, ingested, selected, written, inputs, recorded
        )
        self._write_index(wh, window, ingested, recorded)
        return Landing(ingested, digests, counts, self._quarantine(wh, ingested))

    def _now(
        self,
        paths: Sequence[Path],
        known: Mapping[str, Landed],
        recorded: Mapping[str, EpochInputs],
        epochs: Sequence[Epoch],
        window: TimeWindow,
    ) -> dict[str, Landed] | None:
        """What each landing file holds now: as ``known`` where unchanged, the span of its
        events' times where new or changed (looked into for it); None when no epoch asked
        was stored before (nothing to keep: read as ever)."""
        if not any(recorded.get(epoch_key(e)) for e in epochs):
            return None
        now = {}
        for path in paths:
            if not _changed(path, known):
                now[str(path)] = known[str(path)]
                continue
            times = event_times(path, window)
            first, last = (min(times), max(times)) if times else (None, None)
            now[str(path)] = Landed(file_signature(path), len(times), first, last)
        return now

    def _stored_inputs(self, driver: Driver, keys: Sequence[str]) -> dict[str, list[Version]]:
        """The stored events of the input epochs ``keys``."""
        if not keys:
            return {}
        return {r.name: driver.versions(r.name, keys) for r in self.program.catalog.inputs}

    def _write_index(
        self, wh: Any, window: TimeWindow, ingested: Ingested, recorded: Mapping[str, EpochInputs]
    ) -> None:
        files = {file: entry.to_json() for file, entry in ingested.landed.items()}
        epochs = {k: v.to_json() for k, v in sorted(recorded.items())}
        index = {"times": str(window), "files": files, "epochs": epochs}
        wh.write_text(LANDING_INDEX, json.dumps(index))

    @staticmethod
    def _quarantine(wh: Any, ingested: Ingested) -> str:
        return wh.write_text("_quarantine.jsonl", ingested.quarantine_jsonl())

    def evaluate(
        self, driver: Driver, unit: Unit, epochs: Sequence[Epoch], log: Log | None = None
    ) -> PassStats:
        """A unit's step: its strata over those of ``epochs`` that something stored since
        their versions reaches (a late event's epoch and the epochs its consequences live
        into; see `Driver.evaluate_reached`), a range at once where that stores what epoch
        by epoch stores."""
        strata = [driver.plan.stratum(s.index) for s in unit.strata]
        return driver.evaluate_reached(strata, epochs, bool(unit.carries), log)

    def act(
        self,
        name: str,
        handler: Handler,
        epochs: Sequence[Epoch],
        settings: SparkSettings | None = None,
        log: Log | None = None,
        policy: Policy = DEFAULT,
    ) -> Acted:
        """A handler's step: every event of ``epochs`` it listens to that the ledger does not
        hold as done, handed over epoch by epoch; what it returns landed as input events,
        one generation after the landing files of the epochs."""
        subs = handler_subscriptions(self.program)[name]
        wh = self.storage.warehouse
        results = open_results(self.program, self.schemas, wh, settings, policy)
        ledger = self.storage.open_ledger(self.program.name)
        try:
            by_key = {epoch_key(e): e for e in epochs}
            events = results.handler_events(subs, list(by_key))  # the range in one read
            if hears_withdrawals(handler):
                gone = results.withdrawn_handler_events(subs, list(by_key))
                events = _with_withdrawals(ledger, events, gone)
            reports = {at: ActionReport(name) for at in by_key}
            total = ActionReport(name)
            files = landing_index(results, str(self.storage.window()))
            start = None if epochs[0].previous is None else epochs[0].start
            emitter = Emitter(
                self.program,
                self.storage.landing,
                generation_of_epochs(files, start, epochs[-1].end),
            )
            for at, of_epoch in groupby(events, key=lambda event: event.epoch):
                report = run_actions(handler, of_epoch, ledger, emit=emitter)
                if log is not None:
                    log(
                        f"{show_epoch(by_key[at])}: {report.ran} ran, {report.skipped} done "
                        f"before, {len(report.failed)} failed"
                        + (f", {report.held} held by another run" if report.held else "")
                        + (f"; {report.withdrawn} of them withdrawals" if report.withdrawn else "")
                    )
                reports[at] = report
                total.merge(report)
            done = ledger.counts(name).get("done", 0)
        finally:
            ledger.close()
        return Acted(reports, total, done, emitter.held_back, emitter.max_generation)


def _with_withdrawals(
    ledger: Ledger, inserted: Iterable[ActionEvent], withdrawn: list[ActionEvent]
) -> Iterator[ActionEvent]:
    """A `Listener`'s events epoch by epoch: in each, the withdrawals due, then the events
    derived, each keyed by the handing over it is due (`actions.current`), asked of the
    ledger a batch at a time."""
    by_epoch: dict[str, list[ActionEvent]] = {}
    for event in withdrawn:
        by_epoch.setdefault(event.epoch, []).append(event)
    marks = ((int(k), 0, k, None) for k in sorted(by_epoch, key=int))
    events = ((int(e.epoch), 1, e.epoch, e) for e in inserted)
    batch: list[ActionEvent] = []
    for _, _, epoch, event in heapq.merge(marks, events, key=lambda m: (m[0], m[1])):
        if batch and (event is None or batch[0].epoch != epoch or len(batch) == 1024):
            yield from current(ledger, batch, [])
            batch = []
        if event is None:
            yield from current(ledger, [], by_epoch[epoch])
        else:
            batch.append(event)
    if batch:
        yield from current(ledger, batch, [])


__all__ = [
    "LANDING_INDEX",
    "UndeclaredInputError",
    "undeclared_inputs",
    "Acted",
    "Landing",
    "Pipeline",
    "Storage",
    "event_times",
    "fresh_files",
    "landing_index",
]
