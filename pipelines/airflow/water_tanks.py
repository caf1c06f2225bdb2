"""Airflow DAG file: `rules/water_tanks.pomo` as an hourly DAG (and its landing watcher).

The same warehouse, landing folder and outbox as the Dagster code location
(`pipelines/water_tanks.py`): ``POMO_WAREHOUSE`` (default ``warehouse/``) and
``<POMO_LANDING>/water_tanks`` (default ``landing/water_tanks``), so either orchestrator
can carry on where the other stopped. See the README's "In Airflow" section.

The example covers the hours `pomo generate water-tanks` writes (``POMO_AIRFLOW_HOURS``,
default 3, from 2023-11-14 22:00 UTC): Airflow catches up on them, in time order, as soon
as the DAG is on. A live pipeline leaves ``end_date`` out. The landing watcher looks for
new files every ``POMO_AIRFLOW_POLL_SECONDS`` (default 30).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dagster_pomo.airflow import pomo_dag
from dagster_pomo.examples import CORPORA, outbox_handlers

ROOT = Path(__file__).resolve().parents[2]
warehouse = os.environ.get("POMO_WAREHOUSE", str(ROOT / "warehouse"))
landing = Path(os.environ.get("POMO_LANDING", str(ROOT / "landing"))) / "water_tanks"
landing.mkdir(parents=True, exist_ok=True)
corpus = Path(os.environ.get("POMO_RULES", str(CORPORA))) / "water_tanks.pomo"
start = datetime(2023, 11, 14, 22, tzinfo=UTC)
hours = int(os.environ.get("POMO_AIRFLOW_HOURS", "3"))

dag = pomo_dag(
    corpus,
    warehouse=warehouse,
    landing=str(landing),
    start=start,
    epoch="1h",
    # Each handler records its events and their withdrawals (a `Listener`) in the outbox.
    handlers=outbox_handlers(
        corpus, Path(warehouse) / "water_tanks" / "outbox.sqlite", withdrawals=True
    ),
    end_date=start + timedelta(hours=hours) - timedelta(seconds=1),
    poll_seconds=float(os.environ.get("POMO_AIRFLOW_POLL_SECONDS", "30")),
)
