"""The Airflow layer: a rule corpus as an Airflow 3 DAG (see :func:`pomo_dag`), on the same
engine, warehouse and action ledger as the Dagster layer. Installed with the ``airflow``
extra; it imports no Dagster, as the Dagster layer imports no Airflow."""

from __future__ import annotations

from dagster_pomo.airflow.dag import (
    PomoCorpus,
    PomoOperator,
    pomo_dag,
    pomo_task_group,
    pomo_timetable,
)
from dagster_pomo.airflow.landing import LandingSensor, LandingTrigger, landing_dag

__all__ = [
    "LandingSensor",
    "LandingTrigger",
    "PomoCorpus",
    "PomoOperator",
    "landing_dag",
    "pomo_dag",
    "pomo_task_group",
    "pomo_timetable",
]
