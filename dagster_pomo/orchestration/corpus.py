"""What the assets of one corpus share: the checked program, its schemas, how assets are
named and specified, the driver of a run and the events it ingests."""

import json
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
from dagster_pomo.engine.ingest import Ingested, Landed, corpus_facts, ingest_span, landing_files
from dagster_pomo.errors import UsageError
from dagster_pomo.lang import CorpusError, Program, ast
from dagster_pomo.lang.catalog import CLOCK, first_use
from dagster_pomo.lang.errors import Diagnostic
from dagster_pomo.orchestration.resources import PomoStorage, SparkResource
from dagster_pomo.orchestration.schedules import epoch_ms
from dagster_pomo.orchestration.translator import PomoTranslator
from dagster_pomo.plan.corpus import compile_plan
from dagster_pomo.plan.lineage import column_lineage
from dagster_pomo.plan.schema import infer_schemas
from dagster_pomo.timeline import Epoch, show_duration

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
        f"add `{decl}` with each TYPE one of int, float, str, bool, time, cid",
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


def landing_index(results: Any, times: str) -> dict[str, Landed]:
    """What each landing file held (``_landing.json`` beside the warehouse), as judged with
    the accepted ``times``; empty when it was judged with others or cannot be read."""
    try:
        index = json.loads(results.read_text(LANDING_INDEX) or "{}")
        files = index["files"] if index.get("times") == times else {}
        return {file: Landed.from_json(entry) for file, entry in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


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
        undeclared = [d for r in program.catalog.inputs if (d := undeclared_input(program, r.name))]
        if undeclared:
            raise UndeclaredInputError(program.source, undeclared)
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

    def ingest(self, storage: PomoStorage, driver: Driver, epochs: Sequence[Epoch]) -> Ingested:
        """The landing files' events that may fall in ``epochs``, with the corpus's facts.
        What each file held is kept beside the warehouse (``_landing.json``), so files known
        unchanged to hold nothing in ``epochs`` are not read again."""
        wh = driver.results
        window = storage.window()
        known = landing_index(wh, str(window))
        start = None if epochs[0] == driver.epochs[0] else epochs[0].start
        ingested = ingest_span(
            self.program, landing_files(storage.landing), known, start, epochs[-1].end, window
        )
        files = {file: entry.to_json() for file, entry in ingested.landed.items()}
        wh.write_text(LANDING_INDEX, json.dumps({"times": str(window), "files": files}))
        for name, rows in corpus_facts(self.program).items():
            ingested.events.setdefault(name, []).extend(rows)
        return ingested

    def driver(
        self,
        context: AssetExecutionContext,
        spark: SparkResource,
        storage: PomoStorage,
    ) -> tuple[Driver, list[Epoch]]:
        """A driver over every epoch up to the end of the run's range, and the range's
        epochs in time order."""
        epochs = epochs_through(self.partitions_def, context.partition_keys[-1])
        driver = Driver.open(
            self.program,
            self.schemas,
            storage.warehouse,
            epochs,
            epochs[0].start,
            corpus_facts(self.program),
            policy=spark.policy(),
            settings=spark.settings(len(context.partition_keys)),
            plan=self.plan,
        )
        return driver, epochs[-len(context.partition_keys) :]

    def epochs_of(self, context: AssetExecutionContext) -> list[Epoch]:
        """The epochs of the run's partition range, in time order."""
        epochs = epochs_through(self.partitions_def, context.partition_keys[-1])
        return epochs[-len(context.partition_keys) :]
