"""The Dagster layer: a rule corpus as partitioned assets (see :func:`pomo_definitions`)."""

from __future__ import annotations

from dagster_pomo.orchestration.assets import build_assets, pomo_definitions
from dagster_pomo.orchestration.component import PomoComponent, epoch_partitions
from dagster_pomo.orchestration.corpus_assets import epochs_through
from dagster_pomo.orchestration.resources import PomoStorage, SparkResource
from dagster_pomo.orchestration.translator import PomoTranslator

__all__ = [
    "PomoComponent",
    "epoch_partitions",
    "PomoStorage",
    "PomoTranslator",
    "SparkResource",
    "build_assets",
    "epochs_through",
    "pomo_definitions",
]
