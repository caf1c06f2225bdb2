"""A corpus as Dagster assets: inputs and one multi-asset per unit of strata (see
:mod:`units`), on time-window partitions.

(No ``from __future__ import annotations`` here: Dagster reads the asset functions'
annotations at runtime.)

Every analysis happens when the definitions load (parse, check, stratify); the
asset bodies only evaluate epochs. Each partition is an epoch. Every asset
depends on its own previous partition, so backfills run in time order, and the
strata take a whole partition range in one run (single-run backfill policy),
evaluating it epoch after epoch.
"""

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    BackfillPolicy,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    TimeWindowPartitionMapping,
    TimeWindowPartitionsDefinition,
    multi_asset,
)

from dagster_pomo.engine.actions import Handler, check_handlers
from dagster_pomo.engine.ingest import Ingested, Landed, corpus_facts, ingest_span, landing_files
from dagster_pomo.engine.lines import DEFAULT_TIMES
from dagster_pomo.engine.rows import digest
from dagster_pomo.engine.spark.evaluator import SparkEvaluator, epoch_key
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.errors import UsageError
from dagster_pomo.lang import CorpusError, Program, ast
from dagster_pomo.lang.catalog import first_use
from dagster_pomo.lang.errors import Diagnostic
from dagster_pomo.orchestration.metadata import relation_metadata
from dagster_pomo.orchestration.resources import PomoStorage, SparkResource
from dagster_pomo.orchestration.translator import PomoTranslator
from dagster_pomo.orchestration.units import Unit, units
from dagster_pomo.plan.schema import infer_schemas
from dagster_pomo.timeline import Epoch

PREVIOUS = TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)
LANDING_INDEX = "_landing.json"  # what each landing file held, beside the warehouse


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
        f"add `{decl}` with each TYPE one of int, float, str, bool, time",
    )


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def epochs_through(partitions_def: TimeWindowPartitionsDefinition, last_key: str) -> list[Epoch]:
    """Every epoch from the first partition up to and including ``last_key``."""
    from dagster import PartitionKeyRange

    first = partitions_def.get_first_partition_key()
    assert first is not None
    keys = partitions_def.get_partition_keys_in_range(PartitionKeyRange(first, last_key))
    out: list[Epoch] = []
    previous: Epoch | None = None
    for key in keys:
        window = partitions_def.time_window_for_partition_key(key)
        previous = Epoch(_ms(window.start), _ms(window.end), previous)
        out.append(previous)
    return out


class CorpusAssets:
    """What the assets of one corpus share: the checked program and how to name things."""

    def __init__(
        self,
        program: Program,
        partitions_def: TimeWindowPartitionsDefinition,
        translator: PomoTranslator,
    ) -> None:
        self.program = program
        self.partitions_def = partitions_def
        self.translator = translator
        undeclared = [d for r in program.catalog.inputs if (d := undeclared_input(program, r.name))]
        if undeclared:
            raise UndeclaredInputError(program.source, undeclared)
        self.schemas = infer_schemas(program, {})

    def key(self, relation: str) -> AssetKey:
        return self.translator.get_asset_key(self.program, relation)

    def spec(self, relation: str, deps: Sequence[AssetDep], stratum: int | None) -> AssetSpec:
        program = self.program
        return AssetSpec(
            key=self.key(relation),
            deps=deps,
            group_name=self.translator.get_group_name(program),
            description=self.translator.get_description(program, relation),
            code_version=self.translator.get_code_version(program, relation),
            metadata=self.translator.get_metadata(
                program, relation, self.schemas[relation], stratum
            ),
            partitions_def=self.partitions_def,
            kinds={"spark", "parquet"},
        )

    def multi_asset(  # noqa: ANN201
        self, name: str, specs: Sequence[AssetSpec], checks: Sequence[AssetCheckSpec] = ()
    ):
        """The decorator every multi-asset of the corpus uses: partitioned, never subset,
        a whole partition range in one run."""
        return multi_asset(
            name=f"{self.program.name}__{name}",
            specs=specs,
            check_specs=checks,
            can_subset=False,
            partitions_def=self.partitions_def,
            backfill_policy=BackfillPolicy.single_run(),
        )

    def ingest(
        self, storage: PomoStorage, evaluator: SparkEvaluator, epochs: Sequence[Epoch]
    ) -> Ingested:
        """The landing files' events that may fall in ``epochs``, with the corpus's facts.
        What each file held is kept beside the warehouse (``_landing.json``), so files known
        unchanged to hold nothing in ``epochs`` are not read again."""
        wh = evaluator.wh
        window = storage.window()
        try:
            index = json.loads(wh.read_text(LANDING_INDEX) or "{}")
            # What files held was judged with the accepted times: other times, read again.
            files = index["files"] if index.get("times") == str(window) else {}
            known = {file: Landed.from_json(entry) for file, entry in files.items()}
        except (ValueError, KeyError, TypeError, AttributeError):  # unreadable: read all
            known = {}
        start = None if epochs[0] == evaluator.epochs[0] else epochs[0].start
        ingested = ingest_span(
            self.program, landing_files(storage.landing), known, start, epochs[-1].end, window
        )
        files = {file: entry.to_json() for file, entry in ingested.landed.items()}
        wh.write_text(LANDING_INDEX, json.dumps({"times": str(window), "files": files}))
        for name, rows in corpus_facts(self.program).items():
            ingested.events.setdefault(name, []).extend(rows)
        return ingested

    def evaluator(
        self,
        context: AssetExecutionContext,
        spark: SparkResource,
        storage: PomoStorage,
    ) -> tuple[SparkEvaluator, list[Epoch]]:
        """An evaluator over every epoch up to the end of the run's range, and the range's
        epochs in time order."""
        epochs = epochs_through(self.partitions_def, context.partition_keys[-1])
        session = spark.get_session(len(context.partition_keys))
        warehouse = Warehouse(session, storage.warehouse, self.program.name)
        evaluator = SparkEvaluator(
            session,
            self.program,
            self.schemas,
            warehouse,
            epochs,
            epochs[0].start,
            corpus_facts(self.program),
            policy=spark.policy(),
        )
        return evaluator, epochs[-len(context.partition_keys) :]

    def epochs_of(self, context: AssetExecutionContext) -> list[Epoch]:
        """The epochs of the run's partition range, in time order."""
        epochs = epochs_through(self.partitions_def, context.partition_keys[-1])
        return epochs[-len(context.partition_keys) :]


def build_assets(
    program: Program,
    partitions_def: TimeWindowPartitionsDefinition,
    translator: PomoTranslator | None = None,
    handlers: Mapping[str, Handler] | None = None,
) -> list:
    """The input multi-asset, one multi-asset per unit of strata and one asset per action
    handler in ``handlers``."""
    from dagster_pomo.orchestration.actions import action_assets

    shared = CorpusAssets(program, partitions_def, translator or PomoTranslator())
    assets = [_inputs_asset(shared)] if program.catalog.inputs else []
    assets += [_unit_asset(shared, unit) for unit in units(program)]
    if handlers:
        assets += action_assets(shared, handlers)
    return assets


def _self_deps(shared: CorpusAssets, relation: str) -> list[AssetDep]:
    return [AssetDep(shared.key(relation), partition_mapping=PREVIOUS)]


def _inputs_asset(shared: CorpusAssets):  # noqa: ANN202 - an AssetsDefinition
    program = shared.program
    names = [r.name for r in program.catalog.inputs]
    specs = [shared.spec(n, _self_deps(shared, n), None) for n in names]

    quarantine = AssetCheckSpec(
        "landing_lines_are_valid",
        asset=shared.key(names[0]),
        description="Every line of the landing files is a valid event; bad lines are "
        "quarantined with their reason (warns, never blocks).",
    )

    @shared.multi_asset("inputs", specs, [quarantine])
    def inputs(
        context: AssetExecutionContext, spark: SparkResource, storage: PomoStorage
    ) -> Iterator[MaterializeResult | AssetCheckResult]:
        evaluator, epochs = shared.evaluator(context, spark, storage)
        ingested = shared.ingest(storage, evaluator, epochs)
        chosen = {epoch_key(e) for e in epochs}
        counts = {n: 0 for n in names}
        selected = {}
        for name in names:
            rows = [r for r in ingested.events.get(name, []) if evaluator.key_for(r.kt) in chosen]
            selected[name] = rows
            counts[name] = len(rows)
        evaluator.write_inputs(selected)
        quarantine_file = evaluator.wh.write_text("_quarantine.jsonl", ingested.quarantine_jsonl())
        reasons = [f"{q.file}:{q.line}: {q.reason}" for q in ingested.quarantined[:20]]
        last = epoch_key(epochs[-1])
        for name in names:
            yield MaterializeResult(
                asset_key=shared.key(name),
                # The events themselves are the version: reading unchanged landing files
                # again is no new data, a changed or added event is (a range run versions
                # its partitions by the events of the whole range).
                data_version=DataVersion(digest(selected[name])),
                metadata={
                    "pomo/new_rows": counts[name],
                    **relation_metadata(evaluator.wh, shared.schemas[name], name, last),
                    "pomo/lines_read": ingested.lines_read,
                    "pomo/landing_files_read": MetadataValue.text(
                        f"{ingested.files_read} of {len(ingested.files)}"
                    ),
                    "pomo/quarantined": len(ingested.quarantined),
                    "pomo/quarantine_sample": MetadataValue.md(
                        "\n".join(f"- {r}" for r in reasons) or "none"
                    ),
                },
            )
        yield AssetCheckResult(
            check_name=quarantine.name,
            asset_key=quarantine.asset_key,
            passed=not ingested.quarantined,
            severity=AssetCheckSeverity.WARN,
            metadata={
                "pomo/quarantined": len(ingested.quarantined),
                "pomo/quarantine_file": MetadataValue.path(quarantine_file),
            },
        )

    return inputs


def _unit_asset(shared: CorpusAssets, unit: Unit):  # noqa: ANN202
    """One multi-asset for ``unit``: per epoch, the ``@next`` results, then each stratum."""
    specs = []
    for name in unit.relations:
        deps = [AssetDep(shared.key(r)) for r in sorted(unit.same_epoch)]
        deps += [
            AssetDep(shared.key(r), partition_mapping=PREVIOUS)
            for r in sorted(unit.previous_epoch - unit.same_epoch)
        ]
        stratum = next((s.index for s in unit.strata if name in s.relations), None)
        if stratum is None:
            stratum = shared.program.strata[-1].index
        specs.append(shared.spec(name, [*deps, *_self_deps(shared, name)], stratum))

    @shared.multi_asset(unit.name, specs)
    def evaluate(
        context: AssetExecutionContext, spark: SparkResource, storage: PomoStorage
    ) -> Iterator[MaterializeResult]:
        for name in unit.relations:
            for warning in shared.program.warnings_about(name):
                context.log.warning(warning.render(shared.program.source))
        evaluator, epochs = shared.evaluator(context, spark, storage)
        strata = [evaluator.plan.stratum(s.index) for s in unit.strata]
        rows = {n: 0 for n in unit.relations}
        rounds, seconds, interpreted, in_process = 0, 0.0, 0, 0
        # A range's epochs at once where that stores the same (see `SparkEvaluator.span`).
        span = None if unit.carries else evaluator.span(epochs, strata)
        passes = [span] if span is not None else epochs
        for epoch in passes:
            with evaluator.plans_for(epoch, strata) as without_codegen:
                here = True  # whether every stratum of the pass was worked out in process
                carried = None
                if unit.carries:
                    carried = evaluator.evaluate_next(epoch)
                    for name, n in evaluator.carried_rows.items():
                        rows[name] += n
                for stratum in strata:
                    stats = evaluator.evaluate_stratum(stratum, epoch, carried)
                    for name, n in stats.rows.items():
                        rows[name] += n
                    rounds, seconds = max(rounds, stats.rounds), seconds + stats.seconds
                    here = here and stats.in_process
                    where = " (in process)" if stats.in_process else ""
                    context.log.info(f"{epoch} stratum {stratum.index}{where}: {stats.rows}")
                in_process += here
                interpreted += without_codegen and not here
        last = epoch_key(epochs[-1])
        for name in unit.relations:
            yield MaterializeResult(
                asset_key=shared.key(name),
                metadata={
                    "pomo/new_rows": rows[name],
                    **relation_metadata(evaluator.wh, shared.schemas[name], name, last),
                    "pomo/epochs": len(epochs),
                    "pomo/passes": len(passes),
                    "pomo/fixpoint_rounds_max": rounds,
                    "pomo/evaluation_seconds": round(seconds, 3),
                    "pomo/epochs_interpreted": interpreted,
                    "pomo/passes_in_process": in_process,
                },
            )

    return evaluate


def pomo_definitions(
    corpus: str | Path,
    partitions_def: TimeWindowPartitionsDefinition,
    warehouse: str,
    landing: str,
    skew: str | int = 0,
    handlers: Mapping[str, Handler] | None = None,
    spark: SparkResource | None = None,
    translator: PomoTranslator | None = None,
    ledger: str | None = None,
    times: str = str(DEFAULT_TIMES),
):  # noqa: ANN201 - Definitions
    """Everything Dagster needs for one corpus file: assets (with one per action handler;
    ``handlers`` maps every handler name the corpus uses to a callable), the landing
    sensor, the epoch schedule (each epoch ``skew`` after it ends; a duration such as
    ``"5m"``, or ms) and the resources. ``ledger`` is the folder of the action ledger
    (default: the warehouse, when local); ``times`` the times input events may have
    (``FROM..UNTIL`` or ``any``; events outside are quarantined)."""
    from dagster import AssetSelection, Definitions, in_process_executor

    from dagster_pomo.lang import load_program
    from dagster_pomo.orchestration.schedules import epoch_schedule
    from dagster_pomo.orchestration.sensors import landing_sensor
    from dagster_pomo.timeline import parse_duration

    program = load_program(corpus)
    handlers = dict(handlers or {})
    problems = check_handlers(program, handlers)
    if problems:
        raise UsageError("\n".join(problems))
    translator = translator or PomoTranslator()
    skew_ms = skew if isinstance(skew, int) else parse_duration(skew)
    assets = build_assets(program, partitions_def, translator, handlers)
    selection = AssetSelection.assets(*[key for a in assets for key in a.keys])
    sensors = []
    if program.catalog.inputs:
        first_input = translator.get_asset_key(program, program.catalog.inputs[0].name)
        sensors.append(landing_sensor(program, partitions_def, selection, first_input))
    return Definitions(
        assets=assets,
        sensors=sensors,
        schedules=[epoch_schedule(program, partitions_def, selection, skew_ms)],
        resources={
            "spark": spark or SparkResource(),
            "storage": PomoStorage(
                warehouse=warehouse, landing=landing, ledger=ledger, times=times
            ),
        },
        # A run's steps share one process, so Spark (a JVM, some seconds to start and to
        # warm) starts once a run, not once a multi-asset.
        executor=in_process_executor,
    )


__all__ = ["CorpusAssets", "build_assets", "epochs_through", "pomo_definitions"]
