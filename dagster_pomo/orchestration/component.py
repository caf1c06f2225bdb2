"""A Dagster Component, so a corpus is added with a ``defs.yaml`` and no Python:

.. code-block:: yaml

    type: dagster_pomo.orchestration.PomoComponent
    attributes:
      corpus: water_tanks.pomo        # relative to this folder
      epoch: 1h                       # the partition (epoch) size
      start: "2023-11-14T22:00"       # the first epoch
      warehouse: /data/warehouse
      landing: /data/landing/water_tanks
      skew: 5m
      handlers:                       # handler name -> "module:attribute"
        notify_operator: my_project.handlers:page_the_operator
      lattices:                       # @lattice("name", v) -> "module:attribute"
        flags: dagster_pomo.examples:flags
      spark:                          # as SparkResource: where Spark runs, how the engine may
        master: local[*]
        conf: {spark.sql.shuffle.partitions: "4"}
        spark_landing_bytes: 1073741824   # Spark's tasks read a landing above 1 GiB
        budgets: {rounds: 50000}      # how much one epoch may ask for (docs/operations.md)
"""

from __future__ import annotations

import importlib
from datetime import datetime
from pathlib import Path

import dagster as dg
from pydantic import Field, create_model

from dagster_pomo.engine.lines import DEFAULT_TIMES
from dagster_pomo.errors import UsageError
from dagster_pomo.orchestration.assets import pomo_definitions
from dagster_pomo.orchestration.resources import SparkResource
from dagster_pomo.timeline import parse_duration

_MINUTE = 60_000
_HOUR = 60 * _MINUTE
_DAY = 24 * _HOUR


def epoch_partitions(epoch: str, start: str) -> dg.TimeWindowPartitionsDefinition:
    """Time-window partitions of ``epoch`` (minutes that divide an hour, hours that divide a
    day, or one day) from ``start`` (ISO date or date and time, UTC)."""
    size = parse_duration(epoch)
    fmt = "%Y-%m-%d-%H:%M"
    if size == _DAY:
        cron, fmt = "0 0 * * *", "%Y-%m-%d"
    elif size % _HOUR == 0 and _DAY % size == 0:
        cron = f"0 */{size // _HOUR} * * *"
    elif size % _MINUTE == 0 and _HOUR % size == 0:
        cron = f"*/{size // _MINUTE} * * * *"
    else:
        raise UsageError(
            f"epoch {epoch!r}: Dagster partitions need a size that divides an hour (1m, 5m, "
            "15m, ...) or a day (1h, 2h, 6h, ...), or exactly 1d"
        )
    try:
        first = datetime.fromisoformat(start)
    except ValueError:
        raise UsageError(f"start {start!r}: write an ISO date or date and time") from None
    return dg.TimeWindowPartitionsDefinition(
        cron_schedule=cron, start=first.replace(tzinfo=None), fmt=fmt, timezone="UTC"
    )


def _import(target: str) -> object:
    module, _, attribute = target.partition(":")
    if not attribute:
        raise UsageError(f"handler {target!r}: write it as `package.module:attribute`")
    return getattr(importlib.import_module(module), attribute)


# The `spark:` attribute takes what `SparkResource` takes (where Spark runs, its conf, how
# the engine may run), each field with its default and description: one list of them.
SparkSettingsModel = create_model(
    "SparkSettingsModel",
    __base__=dg.Model,
    **{name: (f.annotation, f) for name, f in SparkResource.model_fields.items()},  # type: ignore[call-overload]
)


class PomoComponent(dg.Component, dg.Model, dg.Resolvable):
    """A rule corpus as partitioned Dagster assets: inputs, strata, actions, the landing
    sensor and the epoch schedule."""

    corpus: str = Field(description="the corpus file, relative to this component's folder")
    epoch: str = Field(default="1h", description="partition (epoch) size: 15m, 1h, 1d, ...")
    start: str = Field(description="the first epoch's start, ISO date or date and time (UTC)")
    warehouse: str = Field(description="warehouse root (a path or any Spark-readable URI)")
    landing: str = Field(description="folder of landing files (JSON Lines or Parquet)")
    skew: str = Field(default="0s", description="how long after an epoch ends to evaluate it")
    handlers: dict[str, str] = Field(
        default_factory=dict, description="action handler name -> `module:attribute`"
    )
    lattices: dict[str, str] = Field(
        default_factory=dict,
        description='lattice name (`@lattice("name", v)`) -> `module:attribute` of its merge',
    )
    ledger: str | None = Field(
        default=None,
        description="the action ledger: a folder (SQLite) or a `postgresql://` URL (write "
        "`{{ env.POMO_LEDGER }}` to keep a password out of the file); default: POMO_LEDGER, "
        "else beside the warehouse",
    )
    times: str = Field(
        default=str(DEFAULT_TIMES),
        description="the times input events may have, FROM..UNTIL or `any`; others are quarantined",
    )
    freshness: str | None = Field(
        default="15m",
        description="how long after the schedule's tick for an epoch its assets are due "
        "(each asset's freshness policy); null: no policy",
    )
    sensor_interval: str = Field(
        default="30s", description="how often the landing sensor looks: 5s, 30s, 2m, ..."
    )
    sensor_running: bool = Field(
        default=False, description="whether the landing sensor is on from the start"
    )
    spark: SparkSettingsModel = Field(default_factory=SparkSettingsModel)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        here = Path(context.path)
        corpus = Path(self.corpus)
        if not corpus.is_absolute():
            corpus = here / corpus

        def local(path: str) -> str:
            if "://" in path or Path(path).is_absolute():
                return path
            return str(here / path)

        handlers = {name: _import(target) for name, target in self.handlers.items()}
        return pomo_definitions(
            corpus,
            epoch_partitions(self.epoch, self.start),
            local(self.warehouse),
            local(self.landing),
            skew=self.skew,
            handlers=handlers,  # type: ignore[arg-type]
            spark=SparkResource(**self.spark.model_dump()),
            ledger=None if self.ledger is None else local(self.ledger),
            times=self.times,
            freshness=self.freshness,
            lattices={name: _import(target) for name, target in self.lattices.items()},  # type: ignore[misc]
            sensor_interval_seconds=_seconds(self.sensor_interval, "sensor_interval"),
            sensor_running=self.sensor_running,
        )


def _seconds(duration: str, field: str) -> int:
    """A duration of whole seconds (at least one), or a ``UsageError`` naming the field."""
    try:
        ms = parse_duration(duration)
    except (ValueError, UsageError) as exc:
        raise UsageError(f"{field}: {exc}") from None
    if ms < 1000 or ms % 1000:
        raise UsageError(f"{field}: {duration!r} is not a whole number of seconds, at least 1s")
    return ms // 1000
