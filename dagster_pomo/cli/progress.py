"""A run's progress on a terminal: what `pomo run` and `pomo explain` show while they read
the events and evaluate the epochs, gone once the run's summary is printed. Nothing is
shown where stderr is no terminal (a log, a pipe) or with ``--quiet``."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from dagster_pomo.engine import driver


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
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[done]}"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=Console(file=stream),
        transient=True,
    )
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
