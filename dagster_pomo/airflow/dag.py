"""A rule corpus as an Airflow 3 DAG, on the same engine, warehouse and ledger as Dagster.

A DAG run's data interval is one epoch (or several: the tasks evaluate every epoch the
interval holds). Catch-up and backfills run the intervals in time order: one run at a
time, and every task waits for its own previous interval, since each epoch reads the
one before. The tasks are one for the input relations, one per unit of strata (the
units of the Dagster multi-assets, `plan.units`) and one per action handler; every
relation is an Airflow `Asset` named ``<corpus>.<relation>`` whose URI is where the
warehouse keeps it, and each task's outlets are what it stores and its inlets what it
reads, so the UI draws the lineage.

Each task calls one step of the engine's pipeline (`engine.pipeline`), the steps the
Dagster assets call: a run of an interval stores the partitions a Dagster run of the
same epochs stores, and hands the ledger the same keys, so a re-run repeats no action.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, BaseOperator, TaskGroup
from airflow.sdk.exceptions import AirflowException
from airflow.timetables.interval import DeltaDataIntervalTimetable

from dagster_pomo.engine.actions import Handler, check_handlers, subscriptions
from dagster_pomo.engine.driver import Driver
from dagster_pomo.engine.lattices import Merge, register_lattices
from dagster_pomo.engine.lattices import require as require_lattices
from dagster_pomo.engine.lines import DEFAULT_TIMES
from dagster_pomo.engine.pipeline import Pipeline, Storage, undeclared_inputs
from dagster_pomo.engine.policy import DEFAULT, Policy
from dagster_pomo.engine.settings import SparkSettings
from dagster_pomo.errors import UsageError
from dagster_pomo.lang import Program, load_program
from dagster_pomo.lang.catalog import CLOCK
from dagster_pomo.plan.units import Unit, units
from dagster_pomo.timeline import (
    Epoch,
    epoch_key,
    epochs,
    parse_duration,
    parse_time,
    show_duration,
    show_epoch,
)

INPUTS = "inputs"  # the input step's task id (no unit is named so: see `plan.units`)


class PomoCorpus:
    """What a corpus's tasks share, made when the DAG file is parsed: the checked program,
    its pipeline (warehouse, landing folder, ledger), the epochs, handlers and Spark."""

    def __init__(
        self,
        corpus: str | Path,
        storage: Storage,
        start: int,
        epoch: int,
        handlers: Mapping[str, Handler] | None = None,
        spark: SparkSettings | None = None,
        spark_conn_id: str | None = None,
        policy: Policy = DEFAULT,
        lattices: Mapping[str, Merge] | None = None,
        budgets: Mapping[str, int] | None = None,
    ) -> None:
        program = load_program(corpus)
        policy = replace(policy, budgets=policy.budgets.with_settings(budgets or {}))
        register_lattices(lattices or {})
        require_lattices(program)
        self.handlers = dict(handlers or {})
        problems = check_handlers(program, self.handlers)
        if problems:
            raise UsageError("\n".join(problems))
        undeclared_inputs(program)
        self.program: Program = program
        self.pipeline = Pipeline(program, storage)
        self.storage = storage
        self.start, self.epoch = start, epoch
        self.spark, self.spark_conn_id, self.policy = spark, spark_conn_id, policy
        self.units = units(program)

    @property
    def name(self) -> str:
        return self.program.name

    def asset(self, relation: str) -> Asset:
        """The relation as an Airflow asset: ``<corpus>.<relation>``, at its warehouse URI."""
        rel = self.program.catalog[relation]
        kind = "input" if rel.is_input else "derived"
        return Asset(
            name=f"{self.name}.{relation}",
            uri=self.storage.relation_uri(self.name, relation),
            group="pomo",
            extra={"corpus": self.name, "relation": relation, "kind": kind},
        )

    def epochs_of(self, context: Mapping[str, Any]) -> tuple[list[Epoch], int]:
        """Every epoch from the pipeline's first through the run's last, and how many of
        the last are the run's: those of the data interval, or of the range a re-run's
        configuration names (``{"from": ..., "through": ...}``, ISO-8601 or ms: the epochs
        from the one holding ``from`` through the one holding ``through``)."""
        conf = getattr(context.get("dag_run"), "conf", None) or {}
        if "from" in conf:
            first = self.epoch_start(parse_time(conf["from"]))
            last = self.epoch_start(parse_time(conf.get("through", conf["from"]))) + self.epoch
        else:
            first = _ms(context["data_interval_start"])
            last = _ms(context["data_interval_end"])
            if (first - self.start) % self.epoch or (last - self.start) % self.epoch:
                raise AirflowException(
                    f"the data interval {show_epoch(Epoch(first, last))} is not made of whole "
                    f"epochs of {self.epoch} ms from {self.start}: schedule the DAG with "
                    "`pomo_timetable` (or one whose intervals are whole epochs)"
                )
        if last <= first:
            raise AirflowException(f"the run's range {first}..{last} holds no epoch")
        if first < self.start:
            raise AirflowException(
                f"the run's range starts at {first}, before the pipeline's first epoch "
                f"({self.start})"
            )
        history = epochs(self.start, last, self.epoch)
        return history, (last - first) // self.epoch

    def epoch_start(self, t: int) -> int:
        """The start of the epoch holding ``t`` (the first, for a time before it)."""
        return self.start + max(0, (t - self.start) // self.epoch) * self.epoch

    def settings(self, epochs: int) -> SparkSettings:
        """Where Spark runs for a run of ``epochs`` (see `SparkSettings.for_epochs`): the
        given settings, else the Airflow connection's (a Spark master URL in its host, or a
        Spark Connect URL, ``sc://...``; Spark settings in its extra's ``conf``), else
        ``POMO_SPARK_MASTER``/``POMO_SPARK_REMOTE`` or local."""
        return self._where().for_epochs(epochs)

    def _where(self) -> SparkSettings:
        if self.spark is not None:
            return self.spark
        if self.spark_conn_id is None:
            return SparkSettings.from_env()
        from airflow.sdk import Connection

        conn = Connection.get(self.spark_conn_id)
        host = (conn.host or "").strip()
        conf = dict((conn.extra_dejson or {}).get("conf", {}))
        if host.startswith("sc://") or conn.conn_type == "spark_connect":
            url = host if host.startswith("sc://") else f"sc://{host}"
            return SparkSettings(remote=f"{url}:{conn.port}" if conn.port else url, conf=conf)
        master = f"{host}:{conn.port}" if conn.port else host
        return SparkSettings(master=master or "local[*]", conf=conf)


class PomoOperator(BaseOperator):
    """One step of a corpus's run over the interval's epochs: the inputs, a unit of
    strata, or an action handler (``step`` is ``inputs``, ``unit`` or ``action``)."""

    ui_color = "#e8dff5"

    def __init__(
        self,
        *,
        corpus: PomoCorpus,
        step: str,
        unit: Unit | None = None,
        handler: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.corpus, self.step, self.unit, self.handler = corpus, step, unit, handler

    def execute(self, context: Any) -> dict[str, Any]:
        history, count = self.corpus.epochs_of(context)
        run = history[-count:]
        shown = (
            show_epoch(run[0]) if count == 1 else f"{show_epoch(run[0])} to {show_epoch(run[-1])}"
        )
        self.log.info(f"{self.corpus.name}, {self.task_id}: {shown}")
        if self.step == "action":
            assert self.handler is not None
            return self._act(run, count)
        pipeline, corpus = self.corpus.pipeline, self.corpus
        driver, run = pipeline.driver(history, count, corpus.policy, corpus.settings(count))
        if self.step == INPUTS:
            landed = pipeline.land(driver, run)
            quarantined = landed.ingested.quarantined
            for q in quarantined[:20]:
                self.log.warning(f"quarantined {q.shown()}")
            keys = [epoch_key(e) for e in run]
            for name in landed.counts:
                counts = {"events": landed.counts[name], **_changes(driver, name, keys)}
                self._tell(context, name, keys, counts)
            return {
                "epochs": [epoch_key(e) for e in run],
                "events": dict(landed.counts),
                "landing_files_read": landed.ingested.files_read,
                "quarantined": len(quarantined),
                "quarantine_file": landed.quarantine_file,
            }
        assert self.unit is not None
        made = pipeline.evaluate(driver, self.unit, run, self.log.info)
        keys = [epoch_key(e) for e in run]
        rows = {n: driver.results.partition_rows(n, keys) for n in self.unit.relations}
        for name, by_epoch in rows.items():
            counts = {"rows": sum(by_epoch.values()), "rows_by_epoch": by_epoch}
            changes = _changes(driver, name, keys, made.kept)
            self._tell(context, name, keys, {**counts, **changes, "kept": list(made.kept)})
        self._check(rows)
        return {
            "epochs": keys,
            "kept": list(made.kept),
            "rows": rows,
            "passes": made.passes,
            "rounds": made.rounds,
        }

    def _tell(
        self, context: Any, relation: str, keys: Sequence[str], counts: Mapping[str, Any]
    ) -> None:
        """What the task stored of ``relation``, on its asset event (Airflow shows it in the
        asset's events; the same figures Dagster's materializations carry)."""
        extra = {"corpus": self.corpus.name, "relation": relation, "epochs": list(keys)}
        context["outlet_events"][self.corpus.asset(relation)].extra = {**extra, **counts}

    def _check(self, rows: Mapping[str, Mapping[str, int]]) -> None:
        """A `.check` relation's events are violations: an error-level one with any in the
        run's epochs fails the task (after storing them), so what depends on it waits; a
        warning-level one logs them."""
        catalog = self.corpus.program.catalog
        for name, by_epoch in rows.items():
            severity = catalog[name].check
            violated = {k: n for k, n in by_epoch.items() if n}
            if severity is None or not violated:
                continue
            text = f"`.check {name}`: {sum(violated.values())} violation(s) in epochs {violated}"
            if severity == "error":
                raise AirflowException(text)
            self.log.warning(text)

    def _act(self, run: Sequence[Epoch], count: int) -> dict[str, Any]:
        corpus, name = self.corpus, self.handler
        assert name is not None
        acted = corpus.pipeline.act(
            name, corpus.handlers[name], run, corpus.settings(count), self.log.info, corpus.policy
        )
        if (warning := acted.held_back_warning()) is not None:
            self.log.warning(warning)
        failure = acted.failure()
        if failure is not None:
            raise AirflowException(failure)  # retried: the ledger hands over the failed only
        total = acted.total
        return {
            "ran": total.ran,
            "withdrawn": total.withdrawn,
            "done_before": total.skipped,
            "held": total.held,
            "emitted": total.emitted,
            "ledger_done": acted.ledger_done,
        }


def pomo_timetable(epoch: str | int) -> DeltaDataIntervalTimetable:
    """A timetable whose data intervals are the epochs, ``epoch`` long (from the DAG's
    ``start_date``, the pipeline's first epoch)."""
    return DeltaDataIntervalTimetable(timedelta(milliseconds=_duration(epoch)))


def pomo_task_group(
    corpus: str | Path,
    *,
    warehouse: str,
    landing: str,
    start: str | int | datetime,
    epoch: str | int = "1h",
    handlers: Mapping[str, Handler] | None = None,
    ledger: str | None = None,
    times: str = str(DEFAULT_TIMES),
    spark: SparkSettings | None = None,
    spark_conn_id: str | None = None,
    policy: Policy = DEFAULT,
    lattices: Mapping[str, Merge] | None = None,
    group_id: str | None = None,
    budgets: Mapping[str, int] | None = None,
) -> TaskGroup:
    """The corpus's tasks as a task group, to put inside a DAG (``with DAG(...):``) whose
    data intervals are whole epochs (`pomo_timetable`), one run at a time. ``start`` is the
    pipeline's first epoch (ISO-8601 or ms), ``epoch`` its length (``"1h"``, ``"1d"``);
    ``handlers`` maps every handler the corpus names to a callable; ``spark`` or
    ``spark_conn_id`` (an Airflow connection) say where Spark runs; ``budgets`` raise or
    lower how much one epoch may ask for (``{"rounds": 50_000}``, docs/operations.md)."""
    shared = PomoCorpus(
        corpus,
        Storage(warehouse, landing, ledger, times),
        _start(start),
        _duration(epoch),
        handlers,
        spark,
        spark_conn_id,
        policy,
        lattices,
        budgets,
    )
    with TaskGroup(group_id or shared.name, prefix_group_id=False) as group:
        _tasks(shared)
    return group


def _tasks(shared: PomoCorpus) -> dict[str, BaseOperator]:
    """The inputs task, a task per unit and per handler, wired by what each reads; by
    task id."""
    program = shared.program
    owner: dict[str, str] = {}
    tasks: dict[str, BaseOperator] = {}
    common = {"corpus": shared, "depends_on_past": True}
    inputs = [r.name for r in program.catalog.inputs]
    if inputs:
        tasks[INPUTS] = PomoOperator(
            task_id=INPUTS,
            step=INPUTS,
            outlets=[shared.asset(n) for n in inputs],
            doc_md=f"Reads the landing files of `{program.name}` into its input relations "
            f"({', '.join(inputs)}) for the interval's epochs; bad lines are quarantined.",
            **common,
        )
        owner.update(dict.fromkeys(inputs, INPUTS))
    for unit in shared.units:
        reads = sorted((unit.same_epoch | unit.previous_epoch) - {CLOCK})
        task = PomoOperator(
            task_id=unit.name,
            step="unit",
            unit=unit,
            inlets=[shared.asset(r) for r in reads if r in program.catalog],
            outlets=[shared.asset(r) for r in unit.relations],
            doc_md=_rules_doc(program, unit.relations),
            **common,
        )
        for r in reads:
            if r in owner:
                tasks[owner[r]] >> task
        tasks[unit.name] = task
        owner.update(dict.fromkeys(unit.relations, unit.name))
    for handler, subs in subscriptions(program).items():
        listens = sorted({s.relation for s in subs})
        task = PomoOperator(
            task_id=f"action__{handler}",
            step="action",
            handler=handler,
            inlets=[shared.asset(r) for r in listens],
            doc_md=f"Calls the handler `{handler}` once per event it listens to:\n\n```\n"
            + "\n".join(program.rule_text(s.rule) for s in subs)
            + "\n```",
            **common,
        )
        for r in listens:
            if r in owner:
                tasks[owner[r]] >> task
        tasks[task.task_id] = task
    return tasks


def _changes(
    driver: Driver, relation: str, keys: Sequence[str], kept: Collection[str] = ()
) -> dict[str, Any]:
    """The events the interval's versions of ``relation`` added and withdrew, in all and by
    epoch (the figures of Dagster's ``pomo/added`` and ``pomo/withdrawn``; none in the
    epochs ``kept`` as stored)."""
    found = driver.results.changes(relation, keys, kept)
    added = {k: c.added for k, c in found.items()}
    withdrawn = {k: c.withdrawn for k, c in found.items()}
    return {
        "added": sum(added.values()),
        "withdrawn": sum(withdrawn.values()),
        "added_by_epoch": added,
        "withdrawn_by_epoch": withdrawn,
    }


def _rules_doc(program: Program, relations: Sequence[str]) -> str:
    rules = [r for r in program.corpus.rules if r.head.relation in relations]
    text = "\n".join(program.rule_text(r) for r in rules)
    return f"Derives {', '.join(f'`{r}`' for r in relations)}:\n\n```\n{text}\n```"


def pomo_dag(
    corpus: str | Path,
    *,
    warehouse: str,
    landing: str,
    start: str | int | datetime,
    epoch: str | int = "1h",
    handlers: Mapping[str, Handler] | None = None,
    ledger: str | None = None,
    times: str = str(DEFAULT_TIMES),
    spark: SparkSettings | None = None,
    spark_conn_id: str | None = None,
    policy: Policy = DEFAULT,
    lattices: Mapping[str, Merge] | None = None,
    dag_id: str | None = None,
    catchup: bool = True,
    watch_landing: bool = True,
    poll_seconds: float = 30.0,
    retries: int = 3,
    retry_delay: timedelta = timedelta(minutes=1),
    budgets: Mapping[str, int] | None = None,
    **dag_kwargs: Any,
) -> DAG:
    """The corpus as a DAG (``dag_id``, default the corpus's name): a run per epoch from
    ``start``, each ``epoch`` long (see `pomo_task_group` for the other arguments).
    ``catchup`` runs the epochs since ``start``; tasks are retried ``retries`` times (a
    handler's failed events only). With ``watch_landing``, a second DAG,
    ``<dag_id>__landing``, watches the landing folder (see `landing`) and re-runs the
    epochs a late file changes, looking every ``poll_seconds``. Other keywords go to `DAG`."""
    start_ms, size = _start(start), _duration(epoch)
    storage = Storage(warehouse, landing, ledger, times)
    shared = PomoCorpus(
        corpus, storage, start_ms, size, handlers, spark, spark_conn_id, policy, lattices, budgets
    )
    dag_id = dag_id or shared.name
    default_args = {"retries": retries, "retry_delay": retry_delay}
    default_args.update(dag_kwargs.pop("default_args", {}))
    with DAG(
        dag_id,
        schedule=pomo_timetable(size),
        start_date=datetime.fromtimestamp(start_ms / 1000, UTC),
        catchup=catchup,
        max_active_runs=1,
        default_args=default_args,
        doc_md=f"The rules of `{Path(str(corpus)).name}`, a run per epoch of "
        f"{show_duration(size)}: inputs, then each unit of strata, then the action "
        "handlers. Each relation is an asset (`<corpus>.<relation>`).",
        tags=dag_kwargs.pop("tags", ["pomo"]),
        **dag_kwargs,
    ) as dag:
        _tasks(shared)
    if watch_landing and shared.program.catalog.inputs:
        from dagster_pomo.airflow.landing import landing_dag

        landing_dag(shared, dag_id, poll_seconds)
    return dag


def _start(start: str | int | datetime) -> int:
    if isinstance(start, datetime):
        moment = start if start.tzinfo else start.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    return parse_time(start)


def _duration(epoch: str | int) -> int:
    return epoch if isinstance(epoch, int) else parse_duration(epoch)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


__all__ = ["PomoCorpus", "PomoOperator", "pomo_dag", "pomo_task_group", "pomo_timetable"]
