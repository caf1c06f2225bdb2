"""A run's progress on a terminal: what `pomo run` and `pomo explain` show while they read
the events and evaluate the epochs, and `pomo demo` while Dagster materializes its
partitions, gone once the summary is printed. Nothing is shown where stderr is no
terminal (a log, a pipe) or with ``--quiet``."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from dagster import AssetKey, DagsterInstance

    from dagster_pomo.engine import driver


def _bar(stream: TextIO) -> Progress:
    """A bar on ``stream``: what is being done, how far, what is done, its rate, the time
    gone; gone once it closes."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[done]}"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=Console(file=stream),
        transient=True,
    )


def wanted(stream: TextIO, quiet: bool) -> bool:
    """Whether to show progress on ``stream``: a terminal, and not asked to be quiet."""
    return not quiet and stream.isatty()


@contextmanager
def run_progress(show: bool, stream: TextIO = sys.stderr) -> Iterator[driver.Progress | None]:
    """A function for `engine.run.run`'s ``progress`` that draws a bar on ``stream``: the
    events read first, then the epochs done of all, their rate and the time gone; None
    when not ``show``."""
    if not show:
        yield None
        return
    bar = _bar(stream)
    task = bar.add_task("reading events", total=None, done="", rate="")
    began = time.monotonic()

    def told(done: float, total: int) -> None:
        elapsed = max(time.monotonic() - began, 1e-9)
        rate = f"{done / elapsed:,.1f} epochs/s" if done else ""
        bar.update(
            task,
            description="evaluating",
            total=total,
            completed=done,
            done=f"{done:,.0f} of {total:,} epoch{'s' if total != 1 else ''}",
            rate=rate,
        )

    with bar:
        yield told


@contextmanager
def materializing(
    show: bool,
    instance: DagsterInstance,
    keys: Sequence[AssetKey],
    partitions: int,
    stream: TextIO = sys.stderr,
) -> Iterator[None]:
    """While a Dagster run in this process materializes ``partitions`` partitions of each
    of ``keys`` on ``instance``, a bar on ``stream`` of the asset partitions done, their
    rate and the time gone, read from the instance's event log twice a second (the run
    itself reports to no one)."""
    if not show:
        yield
        return
    bar = _bar(stream)
    total = len(keys) * partitions
    task = bar.add_task("materializing", total=total, done="", rate="")
    stop = threading.Event()
    began = time.monotonic()

    def look() -> None:
        done = sum(
            len(instance.fetch_materializations(key, limit=partitions).records) for key in keys
        )
        rate = done / max(time.monotonic() - began, 1e-9)
        bar.update(
            task,
            completed=done,
            done=f"{done:,} of {total:,} asset partitions",
            rate=f"{rate:,.1f}/s" if done else "",
        )

    def poll() -> None:
        while not stop.wait(0.5):
            look()

    with bar:
        watcher = threading.Thread(target=poll, name="pomo-demo-progress", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()
            look()  # the last frame counts everything the run did
