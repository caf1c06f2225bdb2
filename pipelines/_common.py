"""Shared set-up of the example code locations: where the warehouse and landing files live."""

from __future__ import annotations

import os
from pathlib import Path

from dagster import Definitions, PartitionsDefinition

from dagster_pomo.orchestration import pomo_definitions

ROOT = Path(__file__).resolve().parent.parent


def example(corpus: str, partitions_def: PartitionsDefinition) -> Definitions:
    """``rules/<corpus>.pomo`` as assets; ``POMO_WAREHOUSE`` and ``POMO_LANDING`` (default
    ``warehouse/`` and ``landing/<corpus>/`` in the repository) say where data lives."""
    warehouse = os.environ.get("POMO_WAREHOUSE", str(ROOT / "warehouse"))
    landing = os.environ.get("POMO_LANDING", str(ROOT / "landing" / corpus))
    Path(landing).mkdir(parents=True, exist_ok=True)
    return pomo_definitions(ROOT / "rules" / f"{corpus}.pomo", partitions_def, warehouse, landing)
