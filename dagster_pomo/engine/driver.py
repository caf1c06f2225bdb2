"""The epoch driver: the engine's public API, and its one epoch loop.

Whoever runs a corpus (``pomo run``, a Dagster asset, the benchmarks) opens a `Driver`
over a warehouse and asks it to evaluate epochs: one epoch, a range of them in as few
passes as store the same, or a group of strata over a partition range (a Dagster
multi-asset). The driver decides the order (``@next`` results first, then each stratum
once the strata it reads are stored, several at once where they are independent), and
collects the statistics; the backend evaluates one stratum of one epoch (or of a range
standing for several) over the stored versions and stores what it derives.

The backend today is Spark's (`engine.spark.evaluator.SparkEvaluator`), which hands the
strata of small epochs to the local executor (`engine.local`). Callers outside the
engine import this module, never the backend's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager
from functools import cached_property
from itertools import takewhile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dagster_pomo.engine.budgets import BudgetExceeded
from dagster_pomo.engine.policy import DEFAULT, Policy
from dagster_pomo.engine.reach import Records, deferred_name, must_evaluate, plan_digest
from dagster_pomo.engine.settings import SparkSettings
from dagster_pomo.engine.stats import EpochScope, EpochStats, PassStats, StratumStats
from dagster_pomo.engine.versions import Version
from dagster_pomo.lang import Program
from dagster_pomo.plan.corpus import CorpusPlan, StratumPlan, compile_plan
from dagster_pomo.plan.schema import Schema
from dagster_pomo.timeline import Epoch, epoch_key, show_epoch

if TYPE_CHECKING:
    from dagster_pomo.engine.inputs import RunInputs
    from dagster_pomo.engine.lines import TimeWindow
    from dagster_pomo.engine.stored import StoredLanding, StoredResults


# Told how much of a range's work is done: ``(done, total)`` in epochs (``done`` may be a
# fraction where strata run one at a time over the whole range).
Progress = Callable[[float, int], None]


class Backend(Protocol):
    """Evaluates one stratum of one epoch (or of a range standing for several) over the
    stored versions, and stores what it derives."""

    plan: CorpusPlan
    epochs: list[Epoch]
    carried_rows: dict[str, int]
    policy: Policy

    def epoch_scope(self, epoch: Epoch) -> AbstractContextManager[EpochScope]:
        """The block in which ``epoch``'s strata are evaluated; what it saw, at its end."""
        ...

    def plans_for(
        self, epoch: Epoch, strata: Sequence[StratumPlan]
    ) -> AbstractContextManager[bool]:
        """The block in which ``strata`` of ``epoch`` are evaluated; whether the backend's
        plans run without generated code in it."""
        ...

    def one_pass(self, epochs: Sequence[Epoch], strata: Sequence[StratumPlan]) -> Epoch | None:
        """One epoch standing for ``epochs`` when ``strata`` can be evaluated over all of
        them at once and store what epoch by epoch stores; None: epoch by epoch."""
        ...

    def evaluate_next(self, epoch: Epoch) -> Any:
        """The ``@next`` results of the epoch before ``epoch``, stored where only ``@next``
        rules derive a relation; given to the strata (``carried``)."""
        ...

    def evaluate_stratum(
        self, stratum: StratumPlan, epoch: Epoch, carried: Any = None
    ) -> StratumStats:
        """One deductive stratum of ``epoch``, stored; every stratum it reads is stored."""
        ...

    def concurrent(self, task: Callable[..., StratumStats]) -> Callable[..., StratumStats]:
        """``task``, to run in another thread with this thread's context."""
        ...

    def discard(self, epoch: Epoch, strata: Sequence[StratumPlan]) -> None:
        """Remove what ``strata`` stored of ``epoch`` (its deferred events too): an epoch
        that stops half-way leaves nothing of itself."""
        ...

    def passing(self, plan: str) -> AbstractContextManager[None]:
        """The block of one pass: what it stores records that pass and ``plan`` (a
        `reach.plan_digest`)."""
        ...

    def stored_versions(self, relations: Iterable[str]) -> Records | None:
        """The records of the stored versions of ``relations``' epochs, by relation and
        epoch key; None where the warehouse keeps none."""
        ...

    def write_inputs(
        self, events: Mapping[str, list[Version]], keys: Collection[str] = ()
    ) -> None: ...

    def store_landing(
        self,
        paths: Sequence[Path],
        epochs: Sequence[Epoch],
        window: TimeWindow,
        facts: Mapping[str, list[Version]],
    ) -> StoredLanding:
        """The landing files ``paths`` read by Spark's tasks, the input relations' events
        of ``epochs`` stored (`engine.spark.landing.store_landing`)."""
        ...

    def key_for(self, t: int) -> str | None: ...

    def versions(self, name: str, keys: Sequence[str] | None = None) -> list[Version]: ...


class Driver:
    """A corpus evaluated epoch by epoch into a warehouse, through a `Backend`.

    ``concurrency``: how many strata of an epoch may run at once (those that read nothing
    the others make); their Spark jobs then overlap each other's fixed costs."""

    def __init__(self, backend: Backend, results: StoredResults, concurrency: int = 2) -> None:
        self.backend = backend
        self.results = results  # what the warehouse holds, for reports and handlers
        self.concurrency = max(1, concurrency)
        self.ran = PassStats({})  # what `evaluate_range` has run, in all

    @classmethod
    def open(
        cls,
        program: Program,
        schemas: Mapping[str, Schema],
        warehouse: str,
        epochs: list[Epoch],
        clock_start: int,
        facts: Mapping[str, list[Version]] | None = None,
        policy: Policy = DEFAULT,
        settings: SparkSettings | None = None,
        session: Any = None,
        plan: CorpusPlan | None = None,
    ) -> Driver:
        """A driver over ``warehouse`` (a folder or URL) for ``epochs``, on the Spark session
        ``settings`` describe (the process's own, made on first use), or on ``session``;
        ``plan``, the corpus's plan when the caller has compiled it already."""
        from dagster_pomo.engine.spark.evaluator import SparkEvaluator
        from dagster_pomo.engine.spark.results import Results
        from dagster_pomo.engine.spark.session import lazy_session
        from dagster_pomo.engine.spark.warehouse import Warehouse

        # Spark starts when a plan first needs it: small epochs never may (see LazySession);
        # told to do without it, never.
        local = policy.local_only
        spark = _without_spark(warehouse) if local else session or lazy_session(settings)
        wh = Warehouse(spark, warehouse, program.name, policy.plan_rows)
        plan = plan or compile_plan(program, schemas)  # the one place a driver compiles
        backend = SparkEvaluator(
            spark, program, schemas, wh, epochs, clock_start, plan, facts, policy=policy
        )
        return cls(backend, Results(wh, schemas))

    @classmethod
    def for_run(
        cls,
        program: Program,
        inputs: RunInputs,
        warehouse: str,
        policy: Policy = DEFAULT,
        settings: SparkSettings | None = None,
        session: Any = None,
    ) -> Driver:
        """A driver over every epoch of ``inputs``, with its events already stored."""
        epochs = inputs.epoch_range
        events = inputs.ingested.events
        driver = cls.open(
            program,
            inputs.schemas,
            warehouse,
            epochs.epochs,
            epochs.start,
            events,
            policy,
            settings,
            session,
        )
        driver.write_inputs(events)
        return driver

    # ------------------------------------------------------------------ what it knows

    @cached_property
    def digest(self) -> str:
        """What the versions this driver stores are evaluated by (`reach.plan_digest`)."""
        return plan_digest(self.plan)

    @property
    def plan(self) -> CorpusPlan:
        return self.backend.plan

    @property
    def epochs(self) -> list[Epoch]:
        return self.backend.epochs

    def write_inputs(self, events: Mapping[str, list[Version]], keys: Collection[str] = ()) -> None:
        """Store each input relation's events in the partitions of their epochs; an epoch
        of ``keys`` where a relation has none holds none of it (a delete line may have
        withdrawn the last)."""
        self.backend.write_inputs(events, keys)

    def key_for(self, t: int) -> str | None:
        """The name of the epoch holding time ``t`` (earlier times go to the first epoch)."""
        return self.backend.key_for(t)

    def reads_on_spark(self, landing: Sequence[Path]) -> bool:
        """Whether the landing files ``landing`` are many enough bytes for Spark's tasks to
        read them (`reads_landing_on_spark`, with this driver's policy)."""
        return reads_landing_on_spark(landing, self.backend.policy)

    def store_landing(
        self,
        paths: Sequence[Path],
        epochs: Sequence[Epoch],
        window: TimeWindow,
        facts: Mapping[str, list[Version]],
    ) -> StoredLanding:
        """As `write_inputs` with the events of the landing files ``paths`` in ``epochs``
        (and the corpus's ``facts``), those files read by Spark's tasks, not this process:
        what they held, and a digest and count of what each input relation stored."""
        return self.backend.store_landing(paths, epochs, window, facts)

    def versions(self, name: str, keys: Sequence[str] | None = None) -> list[Version]:
        """Every stored version of ``name`` (of the epochs ``keys``, default all; in no
        order), read into this process."""
        return self.backend.versions(name, keys)

    def write_events(self, name: str, path: Path, aggregate_keys: Sequence[str]) -> int | None:
        """Write ``name``'s events (as `events` gives them) to ``path`` as JSON Lines, from
        Spark alone (`Results.write_events`); how many, or None when that cannot be done
        here (then `events` streams them)."""
        keys = [epoch_key(e) for e in self.epochs]
        aggregating = bool(self.plan.schemas[name].aggregates)
        return self.results.write_events(name, keys, aggregating, path, aggregate_keys)

    def events(self, name: str) -> Iterator[Version]:
        """``name``'s events over every epoch, one per identity, merged and sorted as outputs
        show them (`versions.merge_versions`), streamed: no more than a partition of them
        in this process at once."""
        keys = [epoch_key(e) for e in self.epochs]
        return self.results.events(name, keys, bool(self.plan.schemas[name].aggregates))

    # ------------------------------------------------------------------ the loop

    def evaluate_epoch(self, epoch: Epoch) -> EpochStats:
        """Every stratum of ``epoch``, in order (``@next`` results of the previous epoch
        first). `BudgetExceeded` (said at the rule, in the epoch) when the epoch asks for
        more than the policy's budgets; nothing of the epoch is stored then."""
        stats = EpochStats(epoch)
        started = time.perf_counter()
        with self._within_budgets(epoch, self.plan.strata), self.backend.passing(self.digest):
            with self.backend.epoch_scope(epoch) as scope:
                with self.backend.plans_for(epoch, self.plan.strata) as stats.interpreted:
                    carried = self.backend.evaluate_next(epoch)
                    stats.strata = self._deductive(epoch, carried)
                stats.seconds = time.perf_counter() - started
        stats.spark_jobs = scope.spark_jobs
        stats.partitions_read = scope.partitions_read
        return stats

    @contextmanager
    def _within_budgets(self, epoch: Epoch, strata: Sequence[StratumPlan]) -> Iterator[None]:
        """A pass over ``epoch``: where it exceeds a budget, what ``strata`` stored of it is
        removed and the error says where (a range's error is the caller's to narrow down,
        epoch by epoch)."""
        try:
            yield
        except BudgetExceeded as exc:
            self.backend.discard(epoch, strata)
            raise exc.located(self.plan.source, show_epoch(epoch)) from None

    def evaluate_range(
        self, epochs: Sequence[Epoch], progress: Progress | None = None
    ) -> PassStats:
        """Every stratum over ``epochs`` (consecutive, in order), storing what epoch by epoch
        stores, in as few passes as `Backend.one_pass` allows: the epochs of the first one's
        length at once, then any shorter last epoch on its own. All strata in one pass when
        the backend allows it for all; else stratum by stratum, those it does not allow
        (recursion that defers events) epoch by epoch; with ``@next`` epoch by epoch. What
        the passes made, and how many ran (added to `ran`). ``progress`` is told, first and
        after each pass, how many of the epochs' worth of work is done (a stratum of ``n``
        over all the epochs: ``1 / n`` of each)."""
        told = progress or (lambda done, total: None)
        told(0, len(epochs))
        same, rest = _by_length(epochs)
        whole = self.backend.one_pass(same, self.plan.strata)
        if whole is not None or self.backend.one_pass(same, []) is None:
            # all strata at once: over the range and the rest, or (none can span: `@next`,
            # under two epochs) epoch by epoch
            out = PassStats({n: 0 for s in self.plan.strata for n in s.relations})
            done = 0
            passes = [whole, *rest] if whole is not None else list(epochs)
            while passes:
                epoch = passes.pop(0)
                try:
                    stats = self.evaluate_epoch(epoch)
                except BudgetExceeded:
                    if epoch is not whole:
                        raise
                    passes[:0] = same  # which epoch: one by one
                    continue
                for stratum in stats.strata:
                    out.count(stratum)
                out.passed(all(s.in_process for s in stats.strata), stats.interpreted)
                done += len(same) if epoch is whole else 1
                told(done, len(epochs))
        else:
            out = PassStats({})
            for i, stratum in enumerate(self.plan.strata, 1):
                out = out + self.evaluate_strata([stratum], epochs)
                told(len(epochs) * i / len(self.plan.strata), len(epochs))
        self.ran = self.ran + out
        return out

    def evaluate_strata(
        self,
        strata: Sequence[StratumPlan],
        epochs: Sequence[Epoch],
        carries: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> PassStats:
        """``strata`` (in order; every stratum they read stored) over ``epochs``: the epochs
        of the first one's length in one pass where the backend allows it, then any shorter
        last epoch on its own; else epoch by epoch. With ``carries``, each pass starts with
        the ``@next`` results of the epoch before. What a Dagster multi-asset runs."""
        names = [n for s in strata for n in s.relations]
        out = PassStats({n: 0 for n in names})
        same, rest = _by_length(epochs)
        whole = None if carries else self.backend.one_pass(same, strata)
        passes = [whole, *rest] if whole is not None else list(epochs)
        while passes:
            epoch = passes.pop(0)
            try:
                with self._within_budgets(epoch, strata):
                    made = self._pass(strata, epoch, carries, log)
            except BudgetExceeded:
                if epoch is not whole:
                    raise
                passes[:0] = same  # which epoch: one by one
                continue
            out = out + made
        return out

    def evaluate_reached(
        self,
        strata: Sequence[StratumPlan],
        epochs: Sequence[Epoch],
        carries: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> PassStats:
        """`evaluate_strata` over those of ``epochs`` that something stored since their
        versions reaches (`reach.must_evaluate`), in passes of consecutive epochs, each
        decided once the pass before is stored; the others keep their versions (listed in
        `PassStats.kept`). Every epoch where that cannot be told: the policy says so
        (`Policy.reach` False), the strata carry ``@next`` results or choose, or the
        warehouse keeps no records. Events an epoch defers to later epochs (a head
        ``@time`` after it) are recorded as versions of their own, which later epochs
        read."""
        own = [n for s in strata for n in s.relations]
        reads = {r for s in strata for r in s.reads}
        told = (
            self.backend.policy.reach
            and not carries
            and not any(s.sides for s in strata)
            and not any(r.startswith("_") for r in reads)
        )
        # Events an epoch defers to later ones are read by those as a relation is.
        reads |= {deferred_name(n) for n in own if n in self.plan.defers}
        records = self.backend.stored_versions({*own, *reads}) if told else None
        if records is None:
            return self.evaluate_strata(strata, epochs, carries, log)
        out = PassStats({n: 0 for n in own})
        pending, kept = list(epochs), []
        while pending:
            due = [must_evaluate(e, own, reads, records, self.digest) for e in pending]
            first = due.index(True) if True in due else len(due)
            last = first + len(list(takewhile(bool, due[first:])))
            kept += pending[:first]
            run, pending = pending[first:last], pending[last:]
            if run:
                out = out + self.evaluate_strata(strata, run, carries, log)
                records = {**records, **(self.backend.stored_versions({*own, *reads}) or {})}
        out.kept = tuple(epoch_key(e) for e in kept)
        if kept and log is not None:
            log(
                f"{len(kept)} of the run's {len(epochs)} epochs kept as stored: nothing stored "
                "since they were evaluated reaches them"
            )
        return out

    def _pass(
        self,
        strata: Sequence[StratumPlan],
        epoch: Epoch,
        carries: bool,
        log: Callable[[str], None] | None,
    ) -> PassStats:
        """``strata`` over ``epoch`` (see `evaluate_strata`), in one pass."""
        out = PassStats({n: 0 for s in strata for n in s.relations})
        passing = self.backend.passing(self.digest)
        with passing, self.backend.plans_for(epoch, strata) as without_codegen:
            here = True  # whether every stratum of the pass was worked out in process
            carried = None
            if carries:
                carried = self.backend.evaluate_next(epoch)
                for name, n in self.backend.carried_rows.items():
                    out.rows[name] = out.rows.get(name, 0) + n
            for stratum in strata:
                stats = self.backend.evaluate_stratum(stratum, epoch, carried)
                out.count(stats)
                here = here and stats.in_process
                if log is not None:
                    where = " (in process)" if stats.in_process else ""
                    made = ", ".join(f"{n} {c:,}" for n, c in stats.rows.items())
                    log(f"{show_epoch(epoch)} stratum {stratum.index}{where}: {made}")
            out.passed(here, without_codegen)
        return out

    def _deductive(self, epoch: Epoch, carried: Any) -> list[StratumStats]:
        """The epoch's deductive strata, each once the strata it reads are stored; up to
        ``concurrency`` of them at once, in threads that carry the epoch's context (Spark's
        job group). When one fails, those under way finish (each writes its epoch whole or
        not at all) and none starts."""
        strata = self.plan.deductive
        evaluate = self.backend.evaluate_stratum
        if self.concurrency == 1:
            return [evaluate(s, epoch, carried) for s in strata]
        owner = {n: s.index for s in strata for n in s.relations}
        needs = {
            s.index: {owner[r] for r in s.reads if owner.get(r, s.index) != s.index} for s in strata
        }
        # How many strata each waits for, and who waits for each: a stratum starts when its
        # count reaches zero (a chain of thousands of strata is not scanned once per stratum).
        left = {s.index: len(needs[s.index]) for s in strata}
        waits_for: dict[int, list[StratumPlan]] = {}
        for s in strata:
            for i in needs[s.index]:
                waits_for.setdefault(i, []).append(s)
        done: dict[int, StratumStats] = {}
        running: dict[Future[StratumStats], int] = {}
        ready = [s for s in strata if not left[s.index]]
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="pomo-stratum") as pool:
            while ready or running:
                for s in ready:
                    task = self.backend.concurrent(evaluate)
                    running[pool.submit(task, s, epoch, carried)] = s.index
                ready = []
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for task in finished:
                    index = running.pop(task)
                    done[index] = task.result()
                    for s in waits_for.get(index, ()):
                        left[s.index] -= 1
                        if not left[s.index]:
                            ready.append(s)
        return [done[s.index] for s in strata]


def _without_spark(warehouse: str) -> Any:
    """A session that never starts (`Policy.local_only`), for a warehouse on this machine:
    whatever would ask Spark for something is an error saying so."""
    from dagster_pomo.engine.spark.session import LazySession
    from dagster_pomo.engine.spark.warehouse import is_local_path
    from dagster_pomo.errors import UsageError

    if not is_local_path(warehouse):
        raise UsageError(
            f"--engine local works out every epoch in this process and reads and writes the "
            f"warehouse itself: {warehouse} is not a folder on this machine"
        )
    return LazySession(SparkSettings(), refusal="--engine local runs without Spark")


def _by_length(epochs: Sequence[Epoch]) -> tuple[list[Epoch], list[Epoch]]:
    """``epochs`` cut where one first differs in length from the first: a range of whole
    epochs, and the rest (a shorter last epoch)."""
    length = epochs[0].end - epochs[0].start if epochs else 0
    cut = next((i for i, e in enumerate(epochs) if e.end - e.start != length), len(epochs))
    return list(epochs[:cut]), list(epochs[cut:])


def open_results(
    program: Program,
    schemas: Mapping[str, Schema],
    warehouse: str,
    settings: SparkSettings | None = None,
    policy: Policy = DEFAULT,
) -> StoredResults:
    """What ``warehouse`` holds of ``program``, without evaluating anything (read by this
    process alone with `Policy.local_only`)."""
    from dagster_pomo.engine.spark.results import Results
    from dagster_pomo.engine.spark.session import lazy_session
    from dagster_pomo.engine.spark.warehouse import Warehouse

    spark = _without_spark(warehouse) if policy.local_only else lazy_session(settings)
    return Results(Warehouse(spark, warehouse, program.name), schemas)


def session(settings: SparkSettings | None = None) -> Any:
    """The process's Spark session (a `pyspark.sql.SparkSession`), started now when it is
    not yet."""
    from dagster_pomo.engine.spark.session import spark_session

    return spark_session(settings)


def describe_session(settings: SparkSettings | None = None) -> str:
    """Where Spark runs, and the settings given to it (without starting it: a run starts
    it when a plan first needs it)."""
    settings = settings or SparkSettings()
    confs = ", ".join(f"{k}={v}" for k, v in settings.conf.items())
    return (settings.remote or settings.master) + (f" ({confs})" if confs else "")


@contextmanager
def evaluated(
    program: Program,
    inputs: RunInputs,
    warehouse: str | None = None,
    policy: Policy = DEFAULT,
    settings: SparkSettings | None = None,
    progress: Progress | None = None,
) -> Iterator[Driver]:
    """A driver over ``warehouse`` (a temporary one, removed at the end of the block, unless
    one is given) with every epoch of ``inputs`` evaluated: over the range at once where
    that stores the same, else (or when ``policy`` says so) epoch by epoch, as a schedule
    does (`Driver.evaluate_range`; what ran in `Driver.ran`), on the Spark that
    ``settings`` describe (default: the environment's)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pomo-warehouse-") as tmp:
        driver = Driver.for_run(program, inputs, warehouse or tmp, policy, settings)
        driver.evaluate_range(inputs.epoch_range.epochs, progress)
        yield driver


@contextmanager
def evaluated_landing(
    program: Program,
    landing: Sequence[Path],
    size: int,
    start: int | None = None,
    until: int | None = None,
    window: TimeWindow | None = None,
    warehouse: str | None = None,
    policy: Policy = DEFAULT,
    settings: SparkSettings | None = None,
    progress: Progress | None = None,
) -> Iterator[tuple[Driver, RunInputs]]:
    """As `evaluated`, the landing files ``landing`` read by Spark's tasks into the
    warehouse (`engine.spark.landing`) rather than by this process: no event in this
    process. The inputs' counts and bad lines with the driver."""
    import tempfile

    from dagster_pomo.engine.spark.landing import read_landing
    from dagster_pomo.engine.spark.session import lazy_session
    from dagster_pomo.engine.spark.warehouse import Warehouse

    with tempfile.TemporaryDirectory(prefix="pomo-warehouse-") as tmp:
        spark = lazy_session(settings)
        wh = Warehouse(spark, warehouse or tmp, program.name)
        with read_landing(spark, wh, program, landing, size, start, until, window) as inputs:
            epochs = inputs.epoch_range
            driver = Driver.open(
                program,
                inputs.schemas,
                warehouse or tmp,
                epochs.epochs,
                epochs.start,
                inputs.ingested.events,  # the facts; those of input relations are stored
                policy,
                session=spark,
            )
            if epochs.epochs:
                driver.evaluate_range(epochs.epochs, progress)
            yield driver, inputs


def reads_landing_on_spark(landing: Sequence[Path], policy: Policy = DEFAULT) -> bool:
    """Whether a run reads ``landing`` with Spark's tasks (`evaluated_landing`): it holds
    more than ``policy.spark_landing_bytes``."""
    if policy.spark_landing_bytes < 0 or not landing:
        return False
    return sum(p.stat().st_size for p in landing) > policy.spark_landing_bytes


__all__ = [
    "Backend",
    "BudgetExceeded",
    "Driver",
    "EpochStats",
    "PassStats",
    "StratumStats",
    "describe_session",
    "evaluated",
    "evaluated_landing",
    "open_results",
    "reads_landing_on_spark",
    "session",
]
