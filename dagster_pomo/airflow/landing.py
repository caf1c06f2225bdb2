"""The landing watcher: new landing files that are late re-run the epochs they change.

A scheduled run of an epoch reads every landing file that holds events of it, so a file that
lands before its epochs run needs nothing more. A file with events of an epoch already
stored is *late* (docs/semantics.md, Late events): that epoch and every later stored one are
run again, in time order, in one run of the corpus's DAG (its configuration names the
range). The watcher is a DAG of its own, ``<dag_id>__landing``, always running
(``@continuous``): a sensor deferred to the triggerer while nothing new lands (no worker
slot waits), then a trigger of the corpus's DAG when something is late.

What the watcher has seen (file name and signature) is kept beside the ledger, so the
same file never triggers twice; a watcher started after a backfill counts the files the
inputs step has read, as they are now, as seen.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import DAG, BaseOperator
from airflow.sdk.exceptions import AirflowSkipException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from dagster_pomo.engine.pipeline import event_times, fresh_files
from dagster_pomo.timeline import show_time

if TYPE_CHECKING:
    from dagster_pomo.airflow.dag import PomoCorpus

SEEN = "_airflow_landing.json"  # what the watcher has seen, beside the ledger


@dataclass(frozen=True)
class Late:
    """The range of epochs to run again, by start (ms), first and last inclusive."""

    first: int
    last: int

    def conf(self) -> dict[str, str]:
        """The corpus DAG's run configuration for the range."""
        return {"from": show_time(self.first), "through": show_time(self.last)}


def late_range(
    corpus: PomoCorpus, files: Mapping[Path, str]
) -> tuple[Late | None, dict[str, list[int]]]:
    """The stored epochs that ``files`` (fresh landing files) hold events of, and every
    later stored one, as one range (None: nothing late); and the epochs each file touches,
    by start."""
    storage = corpus.storage
    first_input = corpus.program.catalog.inputs[0].name
    stored = sorted(int(k) for k in storage.stored_keys(corpus.name, first_input))
    window = storage.window()
    touched: dict[str, list[int]] = {}
    for path in files:
        try:
            times = event_times(path, window)
        except OSError:
            continue
        touched[path.name] = sorted({corpus.epoch_start(t) for t in times})
    late = {k for ks in touched.values() for k in ks} & set(stored)
    if not late:
        return None, touched
    return Late(min(late), stored[-1]), touched


class LandingTrigger(BaseTrigger):
    """Polls the landing folder every ``poll_seconds`` in the triggerer and fires once a
    file is new or changed since ``seen``."""

    def __init__(self, landing: str, seen: dict[str, str], poll_seconds: float = 30.0) -> None:
        super().__init__()
        self.landing, self.seen, self.poll_seconds = landing, seen, poll_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "dagster_pomo.airflow.landing.LandingTrigger",
            {"landing": self.landing, "seen": self.seen, "poll_seconds": self.poll_seconds},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            fresh = await asyncio.to_thread(fresh_files, self.landing, self.seen)
            if fresh:
                yield TriggerEvent({"fresh": sorted(p.name for p in fresh)})
                return
            await asyncio.sleep(self.poll_seconds)


class LandingSensor(BaseOperator):
    """Waits for new or changed landing files (deferred, or polling in the worker when
    ``deferrable`` is false); returns the range of late epochs to run again (XCom
    ``{"from", "through"}``), or skips when the files hold none."""

    ui_color = "#d9f2e6"

    def __init__(
        self,
        *,
        corpus: PomoCorpus,
        poll_seconds: float = 30.0,
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.corpus, self.poll_seconds, self.deferrable = corpus, poll_seconds, deferrable

    @property
    def _seen_file(self) -> Path:
        return self.corpus.storage.beside_ledger(self.corpus.name, SEEN)

    def _seen(self) -> dict[str, str]:
        try:
            return dict(json.loads(self._seen_file.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            storage = self.corpus.storage
            read = storage.read_files(self.corpus.name)
            return {Path(file).name: signature for file, signature in read.items()}

    def execute(self, context: Any) -> dict[str, str]:
        landing = self.corpus.storage.landing
        seen = self._seen()
        fresh = fresh_files(landing, seen)
        while not fresh:
            if self.deferrable:
                self.defer(
                    trigger=LandingTrigger(landing, seen, self.poll_seconds),
                    method_name="execute_complete",
                )
            time.sleep(self.poll_seconds)
            fresh = fresh_files(landing, seen)
        return self._late(seen, fresh)

    def execute_complete(self, context: Any, event: Mapping[str, Any]) -> dict[str, str]:
        seen = self._seen()  # the files as they are now (the event names them as they were)
        return self._late(seen, fresh_files(self.corpus.storage.landing, seen))

    def _late(self, seen: dict[str, str], fresh: Mapping[Path, str]) -> dict[str, str]:
        late, touched = late_range(self.corpus, fresh)
        for name, keys in sorted(touched.items()):
            when = f"{show_time(keys[0])} to {show_time(keys[-1])}" if keys else "no epoch"
            self.log.info(f"{name}: events of {len(keys)} epoch(s), {when}")
        seen.update({path.name: signature for path, signature in fresh.items()})
        self._seen_file.parent.mkdir(parents=True, exist_ok=True)
        self._seen_file.write_text(json.dumps(seen, sort_keys=True), encoding="utf-8")
        if late is None:
            raise AirflowSkipException("the new files are for epochs not run yet")
        conf = late.conf()
        self.log.info(f"late: epochs {conf['from']} through {conf['through']} run again")
        return conf


def landing_dag(corpus: PomoCorpus, dag_id: str, poll_seconds: float = 30.0) -> DAG:
    """The watcher of ``corpus``'s landing folder for the DAG ``dag_id``."""
    from datetime import UTC, datetime

    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

    with DAG(
        f"{dag_id}__landing",
        schedule="@continuous",
        start_date=datetime.fromtimestamp(corpus.start / 1000, UTC),
        catchup=False,
        max_active_runs=1,
        tags=["pomo"],
        doc_md=f"Watches the landing folder of `{corpus.name}`; a file with events of epochs "
        f"`{dag_id}` has run already re-runs them, and every later run one, in one run.",
    ) as dag:
        wait = LandingSensor(
            task_id="wait_for_landing_files", corpus=corpus, poll_seconds=poll_seconds
        )
        pulled = "ti.xcom_pull(task_ids='wait_for_landing_files')"
        rerun = TriggerDagRunOperator(
            task_id="rerun_late_epochs",
            trigger_dag_id=dag_id,
            # A run of no logical date: its range is its configuration's, and it may come
            # after the DAG's end date or its latest interval.
            logical_date=None,
            conf={
                "from": f"{{{{ {pulled}['from'] }}}}",
                "through": f"{{{{ {pulled}['through'] }}}}",
            },
        )
        wait >> rerun
    return dag


__all__ = ["LandingSensor", "LandingTrigger", "Late", "fresh_files", "landing_dag", "late_range"]
