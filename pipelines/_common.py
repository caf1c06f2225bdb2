"""Shared set-up of the example code locations: where the warehouse and landing files live."""

from __future__ import annotations

import os
from pathlib import Path

from dagster import Definitions, PartitionsDefinition

from dagster_pomo.examples import CORPORA, outbox_handlers
from dagster_pomo.orchestration import pomo_definitions

ROOT = Path(__file__).resolve().parent.parent


def example(corpus: str, partitions_def: PartitionsDefinition) -> Definitions:
    """``<POMO_RULES>/<corpus>.pomo`` (default: the example corpora in ``rules/``) as assets;
    the warehouse is ``POMO_WAREHOUSE`` (default ``warehouse/`` in the repository) and landing
    files are read from ``<POMO_LANDING>/<corpus>/`` (default ``landing/<corpus>/``), so each
    corpus has a landing folder of its own. Every action handler records its events, and
    their withdrawals (a `Listener`), in ``<warehouse>/<corpus>/outbox.sqlite``. Copy the
    corpora elsewhere and point ``POMO_RULES`` there to edit rules: after a reload, Dagster
    marks the partitions of the relations an edit changed stale for their code."""
    warehouse = os.environ.get("POMO_WAREHOUSE", str(ROOT / "warehouse"))
    landing = str(Path(os.environ.get("POMO_LANDING", str(ROOT / "landing"))) / corpus)
    Path(landing).mkdir(parents=True, exist_ok=True)
    path = Path(os.environ.get("POMO_RULES", str(CORPORA))) / f"{corpus}.pomo"
    handlers = outbox_handlers(path, Path(warehouse) / corpus / "outbox.sqlite", withdrawals=True)
    return pomo_definitions(path, partitions_def, warehouse, landing, handlers=handlers)
