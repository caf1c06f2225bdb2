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

import warnings
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    DataVersion,
    Failure,
    FreshnessPolicy,
    MaterializeResult,
    MetadataValue,
    PreviewWarning,
    TimeWindowPartitionsDefinition,
)

from dagster_pomo.engine.actions import Handler, check_handlers
from dagster_pomo.engine.driver import BudgetExceeded, Driver
from dagster_pomo.engine.lattices import Merge, register_lattices
from dagster_pomo.engine.lattices import require as require_lattices
from dagster_pomo.engine.lines import DEFAULT_TIMES
from dagster_pomo.errors import UsageError
from dagster_pomo.lang import Program
from dagster_pomo.orchestration.action_assets import action_assets
from dagster_pomo.orchestration.corpus_assets import PREVIOUS, CorpusAssets, epochs_through
from dagster_pomo.orchestration.metadata import partition_metadata
from dagster_pomo.orchestration.resources import PomoStorage, SparkResource
from dagster_pomo.orchestration.translator import PomoTranslator
from dagster_pomo.plan.units import Unit, units
from dagster_pomo.timeline import Epoch, epoch_key


def build_assets(
    program: Program,
    partitions_def: TimeWindowPartitionsDefinition,
    translator: PomoTranslator | None = None,
    handlers: Mapping[str, Handler] | None = None,
    warehouse: str | None = None,
    freshness: FreshnessPolicy | None = None,
    landing: str | None = None,
) -> list:
    """The input multi-asset, one multi-asset per unit of strata and one asset per action
    handler in ``handlers``; ``warehouse``, where the relations are stored (for each
    asset's ``dagster/uri``); ``freshness``, every asset's freshness policy; ``landing``,
    the landing folder (for the command that explains a stored event)."""
    shared = CorpusAssets(
        program, partitions_def, translator or PomoTranslator(), warehouse, freshness, landing
    )
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
        pipeline, driver, epochs = shared.driver(context, spark, storage)
        landed = pipeline.land(driver, epochs)
        ingested = landed.ingested
        reasons = [q.shown() for q in ingested.quarantined[:20]]
        _report_partitions(context, shared, driver, names, epochs)
        for name in names:
            yield MaterializeResult(
                asset_key=shared.key(name),
                # The events themselves are the version: reading unchanged landing files
                # again is no new data, a changed or added event is (a range run versions
                # its partitions by the events of the whole range: Dagster takes one data
                # version per run).
                data_version=DataVersion(landed.digests[name]),
                metadata={
                    # What this run read of the landing folder, for every partition it ran.
                    "pomo/run_landing_files": len(ingested.files),
                    "pomo/run_landing_files_read": ingested.files_read,
                    # Lines of the files read this time (the others known unchanged).
                    "pomo/run_landing_lines_read": ingested.lines_read - ingested.lines_kept,
                    "pomo/quarantined": ingested.quarantined_count,
                    "pomo/quarantine_sample": MetadataValue.md(
                        "\n".join(f"- {r}" for r in reasons) or "none"
                    ),
                },
            )
        yield AssetCheckResult(
            check_name=quarantine.name,
            asset_key=quarantine.asset_key,
            passed=not ingested.quarantined_count,
            severity=AssetCheckSeverity.WARN,
            metadata={
                "pomo/quarantined": ingested.quarantined_count,
                "pomo/quarantine_file": MetadataValue.path(landed.quarantine_file),
            },
        )

    return inputs


def _report_partitions(
    context: AssetExecutionContext,
    shared: CorpusAssets,
    driver: Driver,
    relations: Sequence[str],
    epochs: Sequence[Epoch],
    kept: Collection[str] = (),
) -> dict[str, dict[str, dict[str, Any]]]:
    """Attach to each partition of the run what that partition holds of each of
    ``relations`` (see `metadata.partition_metadata`): a range run reports each partition
    as a run of it alone, in time order, would. Returned by relation and epoch key."""
    keys = [epoch_key(e) for e in epochs]
    history = [epoch_key(e) for e in driver.epochs]  # every epoch through the run's last
    out = {}
    for name in relations:
        schema = shared.schemas[name]
        found = partition_metadata(driver.results, schema, name, keys, history, kept)
        for partition, key in zip(context.partition_keys, keys, strict=True):
            context.add_asset_metadata(
                found[key], asset_key=shared.key(name), partition_key=partition
            )
        out[name] = found
    return out


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

    lineages = {
        name: {k: v for k, v in spec.metadata.items() if k == "dagster/column_lineage"}
        for name, spec in zip(unit.relations, specs, strict=True)
    }
    checks = {name: c for name in unit.relations if (c := _check_spec(shared, name))}

    @shared.multi_asset(unit.name, specs, list(checks.values()))
    def evaluate(
        context: AssetExecutionContext, spark: SparkResource, storage: PomoStorage
    ) -> Iterator[MaterializeResult | AssetCheckResult]:
        for name in unit.relations:
            for warning in shared.program.warnings_about(name):
                context.log.warning(warning.render(shared.program.source))
        pipeline, driver, epochs = shared.driver(context, spark, storage)
        try:
            made = pipeline.evaluate(driver, unit, epochs, context.log.info)
        except BudgetExceeded as exc:  # the corpus asks for too much: its rule, said plainly
            raise Failure(
                description=str(exc),
                metadata={"pomo/budget": exc.budget, "pomo/budget_limit": exc.limit},
                allow_retries=False,
            ) from None
        found = _report_partitions(context, shared, driver, unit.relations, epochs, made.kept)
        for name in unit.relations:
            yield MaterializeResult(
                asset_key=shared.key(name),
                # How the run went, the same for every partition it ran; the column
                # lineage again, where Dagster+ looks for it to draw.
                metadata={
                    **lineages[name],
                    "pomo/run_partitions": len(epochs),
                    "pomo/run_partitions_evaluated": len(epochs) - len(made.kept),
                    "pomo/run_passes": made.passes,
                    "pomo/run_fixpoint_rounds_max": made.rounds,
                    "pomo/run_evaluation_seconds": round(made.seconds, 3),
                    "pomo/run_passes_interpreted": made.interpreted,
                    "pomo/run_passes_in_process": made.in_process,
                },
            )
        for name, check in checks.items():
            yield _check_result(shared, name, check, found[name], context)

    return evaluate


def _check_spec(shared: CorpusAssets, relation: str) -> AssetCheckSpec | None:
    """A `.check` relation's asset check: no violation in the partition. An error-level
    check blocks what depends on the relation in the run; one with ``@warn`` warns. It
    depends on what its rules read, as the UI shows."""
    program = shared.program
    severity = program.catalog[relation].check
    if severity is None:
        return None
    rules = [r for r in program.corpus.rules if r.head.relation == relation and r.body]
    where = ", ".join(f"line {r.span.line}" for r in rules)
    reads = sorted({lit.atom.relation for r in rules for lit in r.body} - {relation, "clock"})
    with warnings.catch_warnings():  # partitioned checks are a preview of Dagster 1.13
        warnings.simplefilter("ignore", PreviewWarning)
        return AssetCheckSpec(
            "no_violation",
            asset=shared.key(relation),
            description=f"`.check {relation}` ({Path(program.source.name).name}, {where}): "
            "every event of it is a violation; the check passes when a partition has none"
            + (" (a warning: it does not block)." if severity == "warn" else "."),
            blocking=severity == "error",
            additional_deps=[shared.key(r) for r in reads],
            partitions_def=shared.partitions_def,
        )


def _check_result(
    shared: CorpusAssets,
    relation: str,
    spec: AssetCheckSpec,
    found: Mapping[str, Mapping[str, Any]],
    context: AssetExecutionContext,
) -> AssetCheckResult:
    """The check over the run's partitions (one, as a sensor or schedule runs them, which
    Dagster records for that partition; a range's as one result): how many violations each
    partition holds, and the first of them."""
    counts = {key: int(meta["pomo/new_rows"]) for key, meta in found.items()}
    violated = {k: n for k, n in counts.items() if n}
    severity = shared.program.catalog[relation].check
    metadata: dict[str, object] = {"pomo/violations": sum(counts.values())}
    if violated:
        metadata["pomo/violations_by_partition"] = MetadataValue.json(violated)
        first = next(iter(violated))  # `found` is in time order
        metadata["pomo/preview"] = found[first]["pomo/preview"]
    if len(counts) > 1:
        context.log.info(f"{relation}: one check result for the {len(counts)} partitions run")
    return AssetCheckResult(
        check_name=spec.name,
        asset_key=spec.asset_key,
        passed=not violated,
        severity=AssetCheckSeverity.WARN if severity == "warn" else AssetCheckSeverity.ERROR,
        metadata=metadata,
    )


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
    freshness: str | int | None = "15m",
    lattices: Mapping[str, Merge] | None = None,
    sensor_interval_seconds: int = 30,
    sensor_running: bool = False,
):  # noqa: ANN201 - Definitions
    """Everything Dagster needs for one corpus file: assets (with one per action handler;
    ``handlers`` maps every handler name the corpus uses to a callable), the corpus's job,
    the landing sensor, the epoch schedule (each epoch ``skew`` after it ends; a duration
    such as ``"5m"``, or ms) and the resources. Every asset's freshness policy expects a
    materialization within ``freshness`` after the schedule's tick for each epoch (None:
    no policy). ``ledger`` is the action ledger, a folder or a PostgreSQL URL (default:
    ``POMO_LEDGER``, else the warehouse when local); ``times`` the times input events may
    have (``FROM..UNTIL`` or ``any``; events outside are quarantined); ``lattices`` maps
    each lattice name the corpus's ``@lattice("name", v)`` heads use to its merge function.
    The landing sensor looks every ``sensor_interval_seconds`` once turned on
    (``sensor_running``: on from the start)."""
    from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor

    from dagster_pomo.lang import load_program
    from dagster_pomo.orchestration.schedules import epoch_freshness, epoch_schedule
    from dagster_pomo.orchestration.sensors import landing_sensor
    from dagster_pomo.timeline import parse_duration

    program = load_program(corpus)
    register_lattices(lattices or {})
    require_lattices(program)
    handlers = dict(handlers or {})
    problems = check_handlers(program, handlers)
    if problems:
        raise UsageError("\n".join(problems))
    translator = translator or PomoTranslator()
    skew_ms = skew if isinstance(skew, int) else parse_duration(skew, zero=True)
    policy = None
    if freshness is not None:
        due = skew_ms + (freshness if isinstance(freshness, int) else parse_duration(freshness))
        policy = epoch_freshness(partitions_def, due)
    assets = build_assets(program, partitions_def, translator, handlers, warehouse, policy, landing)
    selection = AssetSelection.assets(*[key for a in assets for key in a.keys])
    # The whole corpus as one job: a backfill launched from its Partitions page is one run
    # over the range (every asset's backfill policy is single-run), in time order, where a
    # backfill of the assets becomes a run per multi-asset (Dagster runs a self-dependent
    # asset apart from its parents). The sensor and the schedule launch it too, so every
    # run of the corpus is listed under it.
    job = define_asset_job(
        name=program.name,
        selection=selection,  # partitioned as its assets are
        description=f"Every relation and action of `{program.name}`, for a range of epochs.",
    )
    sensors = []
    if program.catalog.inputs:
        first_input = translator.get_asset_key(program, program.catalog.inputs[0].name)
        sensors.append(
            landing_sensor(
                program, job, partitions_def, first_input, sensor_interval_seconds, sensor_running
            )
        )
    return Definitions(
        assets=assets,
        jobs=[job],
        sensors=sensors,
        schedules=[epoch_schedule(program, partitions_def, job, skew_ms)],
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
