"""What the assets of one corpus share: the checked program, its schemas, how assets are
named and specified, the driver of a run and the events it ingests."""

import shlex
import warnings
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    BackfillPolicy,
    BetaWarning,
    CodeReferencesMetadataValue,
    FreshnessPolicy,
    LocalFileCodeReference,
    MetadataValue,
    TableColumnDep,
    TableColumnLineage,
    TimeWindowPartitionMapping,
    TimeWindowPartitionsDefinition,
    multi_asset,
)

from dagster_pomo.engine.driver import Driver
from dagster_pomo.engine.pipeline import Pipeline, undeclared_inputs
from dagster_pomo.lang import Program
from dagster_pomo.lang.catalog import CLOCK
from dagster_pomo.orchestration.resources import PomoStorage, SparkResource
from dagster_pomo.orchestration.schedules import epoch_ms
from dagster_pomo.orchestration.translator import PomoTranslator
from dagster_pomo.plan.corpus import compile_plan
from dagster_pomo.plan.lineage import column_lineage
from dagster_pomo.plan.schema import infer_schemas
from dagster_pomo.timeline import Epoch, show_duration

PREVIOUS = TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)


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
        warehouse: str | None = None,
        freshness: FreshnessPolicy | None = None,
        landing: str | None = None,
    ) -> None:
        self.program = program
        self.landing = landing
        self.freshness = freshness
        self.partitions_def = partitions_def
        self.translator = translator
        self.warehouse = warehouse
        undeclared_inputs(program)
        self.schemas = infer_schemas(program, {})
        self.plan = compile_plan(program, self.schemas)

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
            metadata={
                **self.table_metadata(relation),
                **self.translator.get_metadata(program, relation, self.schemas[relation], stratum),
            },
            partitions_def=self.partitions_def,
            kinds={"spark", "parquet"},
            tags=self.translator.get_tags(program, relation),
            owners=self.translator.get_owners(program, relation),
            freshness_policy=self.freshness,
        )

    def explain_command(self, relation: str) -> str | None:
        """The `pomo explain` command that explains a stored event of a derived ``relation``
        (None where the corpus file, the warehouse or the landing folder is not known)."""
        rel = self.program.catalog[relation]
        path = Path(self.program.source.name)
        if not (rel.derived or rel.inductive) or not path.is_file():
            return None
        if self.warehouse is None or self.landing is None:
            return None
        epoch = epoch_ms(self.partitions_def)
        pattern = f"{relation}({', '.join('_' for _ in range(rel.arity))})"
        return (
            f"pomo explain {shlex.quote(str(path.resolve()))} --warehouse "
            f"{shlex.quote(self.warehouse)} --events {shlex.quote(self.landing)} "
            f"--epoch {show_duration(epoch)} {shlex.quote(pattern)} --at TIME"
        )

    def table_metadata(self, relation: str) -> dict[str, Any]:
        """Where the relation is stored (``dagster/uri``, ``dagster/table_name``), the lines
        of the corpus that define it (``dagster/code_references``), and which columns of
        other assets each of its columns comes from (``dagster/column_lineage``)."""
        program = self.program
        meta: dict[str, Any] = {"dagster/table_name": f"{program.name}.{relation}"}
        if self.warehouse is not None:
            meta["dagster/uri"] = f"{self.warehouse.rstrip('/')}/{program.name}/{relation}"
        path = Path(program.source.name)
        if path.is_file():
            decl = program.catalog[relation].decl
            defined = [("declaration", decl)] if decl is not None else []
            defined += [
                ("fact" if r.is_fact else "rule", r)
                for r in program.corpus.rules
                if r.head.relation == relation and (r.body or r.is_fact)
            ]
            with warnings.catch_warnings():  # code references are a beta of Dagster 1.13
                warnings.simplefilter("ignore", BetaWarning)
                meta["dagster/code_references"] = CodeReferencesMetadataValue(
                    code_references=[
                        LocalFileCodeReference(
                            file_path=str(path.resolve()),
                            line_number=statement.span.line,
                            label=f"{label} ({path.name}:{statement.span.line})",
                        )
                        for label, statement in defined
                    ]
                )
        explain = self.explain_command(relation)
        if explain is not None:
            meta["pomo/explain"] = MetadataValue.md(
                "Why an event of this asset was derived, down to its landing lines, from "
                "the warehouse (nothing is evaluated again; `TIME` is the event's `t`, as in "
                f"a partition's preview):\n\n```\n{explain}\n```"
            )
        lineage = column_lineage(self.plan, relation)
        if lineage:
            meta["dagster/column_lineage"] = TableColumnLineage(
                deps_by_column={
                    self._column(relation, column): [
                        TableColumnDep(self.key(source), self._column(source, source_column))
                        for source, source_column in sorted(sources)
                        if source in self.schemas and source != CLOCK
                    ]
                    for column, sources in lineage.items()
                }
            )
        return meta

    def _column(self, relation: str, column: str) -> str:
        """A stored column as the asset's column schema names it (aggregates by their key)."""
        keys = {f"_agg_{fn}": key for fn, key, _ in self.schemas[relation].aggregates}
        return keys.get(column, column)

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

    def pipeline(self, storage: PomoStorage) -> Pipeline:
        """The engine's steps of a run of this corpus on ``storage``."""
        return Pipeline(self.program, storage.storage(), self.schemas, self.plan)

    def driver(
        self,
        context: AssetExecutionContext,
        spark: SparkResource,
        storage: PomoStorage,
    ) -> tuple[Pipeline, Driver, list[Epoch]]:
        """The run's pipeline, a driver over every epoch up to the end of the run's range,
        and the range's epochs in time order."""
        pipeline = self.pipeline(storage)
        count = len(context.partition_keys)
        history = epochs_through(self.partitions_def, context.partition_keys[-1])
        driver, epochs = pipeline.driver(history, count, spark.policy(), spark.settings(count))
        return pipeline, driver, epochs

    def epochs_of(self, context: AssetExecutionContext) -> list[Epoch]:
        """The epochs of the run's partition range, in time order."""
        epochs = epochs_through(self.partitions_def, context.partition_keys[-1])
        return epochs[-len(context.partition_keys) :]
