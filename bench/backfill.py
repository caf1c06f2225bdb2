"""A backfill through Dagster, in one pass against epoch by epoch: ``python -m bench.backfill``.

Materializes every asset of the water-tank corpus over a range of hourly partitions in one
Dagster run (what a single-run backfill does), with no-op action handlers, in one process:
first one partition to warm the JVM, then the range ``--repeat`` times each way,
alternating. "one pass" is the default, where each stratum's multi-asset evaluates the
range's epochs as one; the peer, "epoch by epoch", is the same run with that turned off
(`SparkResource(one_pass=False)`), as every range ran before. Both warehouses must hold the same
rows. Prints the run's seconds and each step's (from Dagster's step events), medians over
the repeats, and the ratio. ``--pomo-run`` times ``pomo run`` over the same hours instead
(`engine.run.run`, its range at once against ``Policy(one_pass=False)``), without Dagster.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.backfill", description=__doc__)
    parser.add_argument("--hours", type=int, default=24, help="hourly partitions in the range")
    parser.add_argument("--readings", type=int, default=240_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--pomo-run", action="store_true", help="time `pomo run` over the hours, not Dagster"
    )
    args = parser.parse_args(argv)
    if args.hours < 2 or args.readings < 1 or args.repeat < 1:
        parser.error("--hours must be at least 2, --readings and --repeat at least 1")

    from dagster import DagsterInstance, HourlyPartitionsDefinition, materialize

    from bench.w2_epochs import CORPUS, START
    from dagster_pomo.engine.actions import subscriptions
    from dagster_pomo.engine.policy import Policy
    from dagster_pomo.engine.run import run
    from dagster_pomo.examples import HOUR, water_tank_events
    from dagster_pomo.lang import load_program
    from dagster_pomo.orchestration import SparkResource, pomo_definitions

    corpus = CORPUS
    program = load_program(corpus)
    handlers = {name: (lambda event: None) for name in subscriptions(program)}
    partitions = HourlyPartitionsDefinition(start_date=_partition_start(START))
    keys = partitions.get_partition_keys()[: args.hours]
    if len(keys) < args.hours:
        parser.error(f"only {len(keys)} hourly partitions have ended since the data's start")
    seconds: dict[str, list[float]] = defaultdict(list)
    steps: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    stored: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="pomo-backfill-") as tmp:
        landing = Path(tmp) / "landing"
        landing.mkdir()
        water_tank_events(
            landing / "r.jsonl", args.readings, tanks=3, hours=args.hours, start=START
        )
        what = "`pomo run` over" if args.pomo_run else "a range of"
        print(f"{args.readings:,} readings, {what} {args.hours} hourly partitions")
        runs = 0

        def pomo_run(mode: str, hours: int) -> float:
            """`pomo run` over ``hours`` into a fresh warehouse; its seconds."""
            nonlocal runs
            runs += 1
            where = Path(tmp) / f"run{runs}"
            until = START + hours * HOUR
            started = time.perf_counter()
            how = Policy(one_pass=mode == "one pass")
            run(program, landing, HOUR, START, until, "spark", str(where), policy=how)
            took = time.perf_counter() - started
            stored[mode] = _stored_rows(where / program.name)
            return took

        def backfill(mode: str, keys: list[str]) -> float:
            """One Dagster run over ``keys`` in a fresh warehouse and instance; its seconds."""
            nonlocal runs
            runs += 1
            where = Path(tmp) / f"run{runs}"
            (where / "home").mkdir(parents=True)
            defs = pomo_definitions(
                corpus, partitions, str(where / "wh"), str(landing), handlers=handlers
            )
            resources = dict(defs.resources)
            resources["spark"] = SparkResource(one_pass=mode == "one pass")
            started = time.perf_counter()
            result = materialize(
                list(defs.assets),
                instance=DagsterInstance.local_temp(str(where / "home")),
                resources=resources,
                tags={
                    "dagster/asset_partition_range_start": keys[0],
                    "dagster/asset_partition_range_end": keys[-1],
                },
            )
            took = time.perf_counter() - started
            assert result.success, f"the {mode} run failed"
            for step, step_seconds in _step_seconds(result).items():
                steps[mode][step].append(step_seconds)
            stored[mode] = _stored_rows(where / "wh" / program.name)
            return took

        if args.pomo_run:
            pomo_run("one pass", 1)  # the JVM warms up
        else:
            backfill("one pass", keys[:1])
        for _ in range(args.repeat):
            for mode in ("one pass", "epoch by epoch"):
                took = pomo_run(mode, args.hours) if args.pomo_run else backfill(mode, keys)
                seconds[mode].append(took)
    if stored["one pass"] != stored["epoch by epoch"]:
        raise SystemExit(f"the warehouses differ: {stored}")
    one, each = (statistics.median(seconds[m]) for m in ("one pass", "epoch by epoch"))
    print(f"{'step':<40} {'one pass s':>11} {'epoch by epoch s':>17}")
    for step in steps["one pass"]:
        a, b = (statistics.median(steps[m][step]) for m in ("one pass", "epoch by epoch"))
        print(f"{step:<40} {a:11.2f} {b:17.2f}")
    print(f"{'the run':<40} {one:11.2f} {each:17.2f}")
    print(
        f"one pass / epoch by epoch: {one / each:.2f}x (medians of {args.repeat}; runs "
        f"{', '.join(f'{s:.1f}' for s in seconds['one pass'])} s against "
        f"{', '.join(f'{s:.1f}' for s in seconds['epoch by epoch'])} s); the same rows "
        f"stored: {sum(stored['one pass'].values()):,}"
    )
    return 0


def _partition_start(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d-%H:%M")


def _step_seconds(result) -> dict[str, float]:  # noqa: ANN001 (Dagster's result)
    """Each step's seconds, as its success event gives them."""
    return {
        event.step_key: event.event_specific_data.duration_ms / 1000
        for event in result.all_events
        if event.event_type_value == "STEP_SUCCESS"
    }


def _stored_rows(root: Path) -> dict[str, int]:
    """Rows stored per partition folder, deferred events' too (from the Parquet footers;
    the folders without rows left out: an empty epoch may keep an empty file or none)."""
    import pyarrow.parquet as pq

    rows: dict[str, int] = defaultdict(int)
    for f in root.rglob("*.parquet"):
        rows[str(f.parent.relative_to(root))] += pq.read_metadata(f).num_rows
    return {folder: n for folder, n in sorted(rows.items()) if n}


if __name__ == "__main__":
    raise SystemExit(main())
