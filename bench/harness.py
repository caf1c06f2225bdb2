"""Timing, memory and the results table shared by the workloads.

Every case runs ``repeat`` times; the table shows the median and the ratio of
dagster-pomo to each peer. Peak memory is the high-water mark of resident memory,
reset before each case through ``/proc/<pid>/clear_refs``, of this process (where
DuckDB, SQLite and the Python side of Spark run) and, separately, the sum over the
Spark driver JVM (which keeps the heap it has grown, so its figure is mostly its size)
and the Python workers under it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagster_pomo.engine.policy import Policy


@dataclass
class Measurement:
    """One system on one case: its times over the repeats and what else was observed."""

    case: str
    system: str
    seconds: list[float] = field(default_factory=list)
    peak_mb: float = 0.0  # this process
    jvm_mb: float = 0.0  # the Spark driver JVM and its Python workers
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "system": self.system,
            "seconds": self.seconds,
            "median": self.median,
            "peak_mb": round(self.peak_mb, 1),
            "jvm_mb": round(self.jvm_mb, 1),
            **self.extra,
        }


def _jvm_pids() -> list[int]:
    """The local Spark driver JVM and every process under it: the Python daemon and the
    workers it forks, which run sliding aggregates and recursive rounds."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return []
    proc = getattr(SparkContext._gateway, "proc", None)  # type: ignore[attr-defined]
    if proc is None:
        return []
    return [proc.pid, *descendants(proc.pid)]


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` now (Linux ``/proc``; none elsewhere)."""
    found, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            try:
                children = [int(p) for p in task.read_text().split()]
            except OSError:  # the process or thread ended
                continue
            found += children
            todo += children
    return found


TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc's CPU time unit


def proc_stat(path: str | Path) -> tuple[str, list[str]] | None:
    """The name and the fields after it of a ``/proc/.../stat`` file (field 0 is the state,
    1 the parent, 11 and 12 the user and system CPU ticks, 13 and 14 those of waited-for
    children); None once the process or thread has ended."""
    try:
        raw = Path(path).read_text()
    except OSError:
        return None
    return raw[raw.index("(") + 1 : raw.rindex(")")], raw.rsplit(")", 1)[1].split()


def thread_cpu(pid: int) -> dict[str, tuple[str, float]]:
    """Each thread of process ``pid`` by id: its Linux name (the first 15 characters of the
    JVM's name for it) and the CPU seconds it has used (Linux ``/proc``; empty elsewhere)."""
    out: dict[str, tuple[str, float]] = {}
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        if (read := proc_stat(stat)) is not None:
            name, fields = read
            out[stat.parent.name] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def reset_peaks() -> None:
    for pid in [os.getpid(), *_jvm_pids()]:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            pass


def peak_mb(pids: list[int]) -> float:
    """The sum of the resident high-water marks of ``pids`` since :func:`reset_peaks`."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def measure(
    case: str,
    system: str,
    repeat: int,
    once: Callable[[], dict[str, Any] | None],
) -> Measurement:
    """Run ``once`` ``repeat`` times; it returns what it observed (rows, jobs, ...), and the
    last run's observations are kept. Set-up belongs outside ``once``; where it cannot be,
    ``once`` reports the time that counts as ``seconds``."""
    m = Measurement(case, system)
    reset_peaks()
    for _ in range(repeat):
        began = time.perf_counter()
        observed = dict(once() or {})
        elapsed = time.perf_counter() - began
        m.seconds.append(observed.pop("seconds", elapsed))
        m.extra.update(observed)
    m.peak_mb, m.jvm_mb = peak_mb([os.getpid()]), peak_mb(_jvm_pids())
    print(f"  {case:<28} {system:<26} median {m.median:8.3f} s  {_extras(m.extra)}", flush=True)
    return m


def _extras(extra: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={v}"
        for k, v in extra.items()
        if not k.startswith("_") and not isinstance(v, list | dict)
    )


def table(measurements: list[Measurement], ours: str = "dagster-pomo") -> str:
    """A Markdown table: per case and system, the median, the spread, peak memory, the ratio
    of dagster-pomo to that system and what the run observed."""
    lines = [
        "| case | system | median s | min–max s | pomo / this | peak MB (JVM) | notes |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    by_case: dict[str, list[Measurement]] = {}
    for m in measurements:
        by_case.setdefault(m.case, []).append(m)
    for case, ms in by_case.items():
        base = next((m for m in ms if m.system == ours), None)
        for m in ms:
            ratio = "" if base is None or m is base else f"{base.median / m.median:.2f}x"
            spread = f"{min(m.seconds):.3f}–{max(m.seconds):.3f}"
            lines.append(
                f"| {case} | {m.system} | {m.median:.3f} | {spread} | {ratio} "
                f"| {m.peak_mb:,.0f} ({m.jvm_mb:,.0f}) | {_extras(m.extra)} |"
            )
    return "\n".join(lines)


def spark_plans_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spark-plans",
        action="store_true",
        help="evaluate small epochs on Spark's plans too, not in this process "
        "(Policy.in_process_inputs = 0)",
    )


def policy_of(args: argparse.Namespace) -> Policy:
    """The engine's policy the options ask for: ``--spark-plans``, every epoch on Spark's
    plans."""
    from dagster_pomo.engine.policy import Policy

    return Policy(in_process_inputs=0) if args.spark_plans else Policy()
