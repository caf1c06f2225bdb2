"""W6: late events. The water tanks over a day of hourly epochs, evaluated through the
pipeline's steps (the inputs, then each unit, as a Dagster or Airflow run does); then a
late file of readings, 1% of an epoch's volume, all in one epoch in the middle of the day.
Timed, each from the same warehouse (copied back before every repeat, not timed):

- **late, to the end**: that epoch and every later one asked for, as the landing sensor
  asks; each step evaluates those a change reaches and keeps the rest (`engine.reach`),
  the changes of every new version recorded;
- **late, every epoch**: the same with ``reach`` off, every epoch asked for evaluated;
- **late, what it reaches**: only that epoch and the next asked for (a reading lives ten
  minutes, so nothing it makes reaches further);
- **from scratch**: the whole day again into an empty warehouse, in one run.

The warehouse after "late, to the end" is checked to hold what "from scratch" holds.

``python -m bench.w6_late [--readings N] [--hours H] [--repeat R]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from dagster_pomo.examples import CORPORA, DEFAULT_START, HOUR, water_tank_events

CORPUS = CORPORA / "water_tanks.pomo"


def _steps(warehouse: str, landing: Path, hours: int, count: int, reach: bool = True) -> float:
    """The inputs and every unit over the last ``count`` of the first ``hours`` epochs (a
    run of those partitions); seconds."""
    from dagster_pomo.engine.pipeline import Pipeline, Storage
    from dagster_pomo.engine.policy import DEFAULT
    from dagster_pomo.lang import load_program
    from dagster_pomo.plan.units import units
    from dagster_pomo.timeline import epochs

    began = time.perf_counter()
    program = load_program(CORPUS)
    pipeline = Pipeline(program, Storage(warehouse, str(landing)))
    history = epochs(DEFAULT_START, DEFAULT_START + hours * HOUR, HOUR)
    driver, run = pipeline.driver(history, count, replace(DEFAULT, reach=reach))
    pipeline.land(driver, run)
    for unit in units(program):
        pipeline.evaluate(driver, unit, run)
    return time.perf_counter() - began


def _held(warehouse: str) -> dict[str, int]:
    """Rows per derived relation the warehouse holds (a check, not timed)."""
    import pyarrow.parquet as pq

    root = Path(warehouse) / "water_tanks"
    return {
        rel: sum(pq.read_metadata(f).num_rows for f in (root / rel).glob("epoch=*/*.parquet"))
        for rel in ("level_per_minute", "level_10m", "near_capacity", "overflow_alert")
    }


def _changes(warehouse: str) -> dict[str, tuple[int, int]]:
    """Per relation, the events the latest versions added and withdrew."""
    root = Path(warehouse) / "water_tanks" / "_changes"
    out: dict[str, tuple[int, int]] = {}
    for summary in sorted(root.glob("*/epoch=*/summary.json")):
        found = json.loads(summary.read_text())
        rel = summary.parent.parent.name
        added, withdrawn = out.get(rel, (0, 0))
        out[rel] = (added + found["added"], withdrawn + found["withdrawn"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.w6_late", description=__doc__)
    parser.add_argument("--readings", type=int, default=240_000, help="readings in the day")
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    hours, late_hour = args.hours, args.hours // 2
    per_epoch = args.readings // hours
    with tempfile.TemporaryDirectory(prefix="pomo-bench-w6-") as tmp:
        landing = Path(tmp) / "landing"
        landing.mkdir()
        water_tank_events(landing / "day.jsonl", args.readings, tanks=3, hours=hours)
        base = f"{tmp}/base"
        _steps(base, landing, hours, hours)  # the day as it first ran (set-up)
        late = max(1, per_epoch // 100)
        start = DEFAULT_START + late_hour * HOUR
        lines = [
            {"relation": "water_level", "t": start + i * (HOUR // late), "args": ["north", 95.0]}
            for i in range(late)
        ]
        (landing / "late.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
        cases = {  # through which epoch, how many of them
            "late, to the end": (hours, hours - late_hour),
            "late, every epoch": (hours, hours - late_hour),
            "late, what it reaches": (late_hour + 2, 2),
            "from scratch": (hours, hours),
        }
        times: dict[str, list[float]] = {c: [] for c in cases}
        held: dict[str, dict[str, int]] = {}
        changed: dict[str, dict[str, tuple[int, int]]] = {}
        for _ in range(args.repeat):
            for case, (through, count) in cases.items():
                where = f"{tmp}/{case.replace(' ', '_').replace(',', '')}"
                shutil.rmtree(where, ignore_errors=True)
                if case != "from scratch":
                    shutil.copytree(base, where)
                every = case != "late, every epoch"
                times[case].append(_steps(where, landing, through, count, every))
                held[case], changed[case] = _held(where), _changes(where)
        assert held["late, to the end"] == held["from scratch"], held
        assert held["late, every epoch"] == held["from scratch"], held
    print(f"W6: water tanks, {hours} x 1h, {args.readings:,} readings; {late} late readings")
    print(f"in epoch {late_hour} ({late / per_epoch:.1%} of its {per_epoch:,})")
    print(f"{'case':<24}{'epochs':>7}{'median s':>10}{'vs scratch':>11}")
    scratch = statistics.median(times["from scratch"])
    for case, (_, count) in cases.items():
        median = statistics.median(times[case])
        print(f"{case:<24}{count:>7}{median:>10.2f}{median / scratch:>10.2f}x")
    for case in ("late, to the end", "late, what it reaches"):
        found = ", ".join(f"{r} +{a:,} -{w:,}" for r, (a, w) in changed[case].items() if a or w)
        print(f"{case}: the new versions changed {found or 'nothing'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
