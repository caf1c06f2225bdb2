"""One asset per action handler, downstream of the relations it listens to.

(No ``from __future__ import annotations`` here: Dagster reads the asset functions'
annotations at runtime.)

Materializing a handler's partition hands every event of that epoch that the
handler listens to, and that the ledger does not hold as done, to the handler.
Failures fail the step, naming the events, after every other event has run;
running the step again retries exactly the failed ones.
"""

from collections.abc import Iterator, Mapping

from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    Failure,
    MaterializeResult,
    MetadataValue,
)

from dagster_pomo.engine.actions import (
    Handler,
    Subscription,
    subscriptions,
)
from dagster_pomo.engine.ledger import is_postgres, shown
from dagster_pomo.orchestration.corpus_assets import PREVIOUS, CorpusAssets
from dagster_pomo.orchestration.resources import PomoStorage, SparkResource
from dagster_pomo.orchestration.translator import code_version


def action_key(shared: CorpusAssets, handler: str) -> AssetKey:
    return AssetKey([shared.program.name, "action", handler])


def action_assets(shared: CorpusAssets, handlers: Mapping[str, Handler]) -> list:
    """An asset per handler the corpus names (``handlers`` must hold every one)."""
    return [
        _action_asset(shared, name, subs, handlers[name])
        for name, subs in subscriptions(shared.program).items()
    ]


def _action_asset(  # noqa: ANN202 - an AssetsDefinition
    shared: CorpusAssets, name: str, subs: list[Subscription], handler: Handler
):
    program = shared.program
    key = action_key(shared, name)
    relations = sorted({s.relation for s in subs})
    rules = "\n".join(program.rule_text(s.rule) for s in subs)
    spec = AssetSpec(
        key=key,
        deps=[AssetDep(shared.key(r)) for r in relations]
        + [AssetDep(key, partition_mapping=PREVIOUS)],
        group_name=shared.translator.get_group_name(program),
        description=f"Calls the handler `{name}` once per event it listens to:\n\n{rules}",
        # What it listens to: relations and patterns (the events' own rules version theirs).
        code_version=code_version(
            "\n".join(sorted(repr((s.relation, s.equals, s.same)) for s in subs))
        ),
        metadata={
            "pomo/handler": name,
            "pomo/listens_to": ", ".join(relations),
            "pomo/rules": MetadataValue.md(f"```\n{rules}\n```"),
        },
        partitions_def=shared.partitions_def,
        freshness_policy=shared.freshness,
        kinds={"python"},
    )

    handed_over = AssetCheckSpec(
        "every_event_handed_over",
        asset=key,
        description=f"Every event `{name}` listens to in the run's epochs was handed over "
        "and its call returned; failed ones are retried by the next run of the epoch.",
    )

    @shared.multi_asset(f"action__{name}", [spec], [handed_over])
    def act(
        context: AssetExecutionContext, spark: SparkResource, storage: PomoStorage
    ) -> Iterator[MaterializeResult | AssetCheckResult]:
        settings = spark.settings(len(context.partition_keys))
        pipeline = shared.pipeline(storage)
        epochs = shared.epochs_of(context)
        acted = pipeline.act(name, handler, epochs, settings, context.log.info, spark.policy())
        total = acted.total
        # What each partition's events came to: a range run reports each partition as a run
        # of it alone would.
        for partition, report in zip(context.partition_keys, acted.by_epoch.values(), strict=True):
            context.add_asset_metadata(
                {
                    "pomo/actions_ran": report.ran,
                    # Of those, withdrawals of events handed over before (a `Listener`).
                    "pomo/actions_withdrawn": report.withdrawn,
                    "pomo/actions_done_before": report.skipped,
                    "pomo/actions_failed": len(report.failed),
                    # Claimed by an overlapping run at the time, which hands them over.
                    "pomo/actions_held": report.held,
                    # What the handler returned, landed as input events.
                    "pomo/events_emitted": report.emitted,
                },
                asset_key=key,
                partition_key=partition,
            )
        if (warning := acted.held_back_warning()) is not None:
            context.log.warning(warning)
        yield AssetCheckResult(
            check_name=handed_over.name,
            asset_key=key,
            passed=not total.failed and not total.held,
            metadata={
                "pomo/actions_ran": total.ran,
                "pomo/actions_failed": len(total.failed),
                "pomo/actions_held": total.held,
                "pomo/ledger_done": acted.ledger_done,
                "pomo/events_emitted": total.emitted,
                "pomo/events_held_back": acted.held_back,
            },
        )
        failure = acted.failure()
        if failure is not None:
            raise Failure(
                description=failure,
                metadata={"pomo/actions_ran": total.ran, "pomo/actions_failed": len(total.failed)},
            )
        yield MaterializeResult(
            asset_key=key,
            metadata={
                # The run's handler speed; the ledger's count for the handler, every run's.
                "pomo/run_actions_per_second": round(total.ran / total.seconds, 1)
                if total.seconds and total.ran
                else 0.0,
                "pomo/ledger": ledger_metadata(storage.ledger_location(program.name)),
                "pomo/ledger_done": acted.ledger_done,
            },
        )

    return act


def ledger_metadata(location: str) -> MetadataValue:
    """The ledger as the UI shows it: a file's path, or the database's URL without its
    password."""
    if is_postgres(location):
        return MetadataValue.text(shown(location))
    return MetadataValue.path(location)
