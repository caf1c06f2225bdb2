"""``python -m bench [w1] [w2] [w3]``: run workloads and their peers, print the tables.

Every workload and its peers run in this one process, on one Spark session, each case
``--repeat`` times (median shown). ``--json FILE`` keeps everything measured, including
W2's time per epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from bench import harness


def machine() -> dict[str, str]:
    import duckdb
    import pyspark

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    memory = next(
        (
            f"{int(line.split()[1]) / 1024**2:.1f} GiB"
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        "unknown",
    )
    return {
        "cpu": f"{cpu} x {os.cpu_count()}",
        "memory": memory,
        "os": platform.platform(),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "duckdb": duckdb.__version__,
        "sqlite": __import__("sqlite3").sqlite_version,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("workloads", nargs="*", default=["w1", "w2", "w3"])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (default 3)")
    parser.add_argument("--scale", type=float, default=1.0, help="W1 graph size factor")
    parser.add_argument(
        "--programs",
        default="tc,sg",
        help="W1 programs (tc, sg; nl, the non-linear closure, and counter, a self-join of "
        "a thousand rounds, run on the chain graph)",
    )
    parser.add_argument("--graphs", default="", help="W1: only graphs whose name contains these")
    parser.add_argument("--readings", type=int, default=1_000_000, help="W2 readings")
    parser.add_argument("--hours", type=int, default=100, help="W2 hourly epochs")
    parser.add_argument("--samples", type=int, default=5, help="W2 re-evaluation samples")
    parser.add_argument(
        "--no-hand-written",
        action="store_true",
        help="W2: leave out the hand-written PySpark job (its ten-minute range window "
        "grows with the square of the readings a minute; for runs at many readings)",
    )
    parser.add_argument(
        "--provenance",
        action="store_true",
        help="W2: also run it with `@provenance` on the alerts (its cost)",
    )
    parser.add_argument("--actions", type=int, default=100_000, help="W3 derived events")
    parser.add_argument("--json", help="write every measurement to this file")
    harness.spark_plans_option(parser)
    args = parser.parse_args(argv)
    policy = harness.policy_of(args)

    if {"w1", "w2"} & set(args.workloads):
        from dataclasses import replace

        from dagster_pomo.engine.settings import SparkSettings
        from dagster_pomo.engine.spark.session import spark_session

        # Spark's status tracker keeps the last 1,000 jobs by default; the 1,000-node
        # cycle's epoch alone runs twice as many, and its job count must be whole.
        settings = SparkSettings.from_env()
        conf = {**settings.conf, "spark.ui.retainedJobs": "100000"}
        spark_session(replace(settings, conf=conf))
    facts = machine()
    print("machine: " + "; ".join(f"{k} {v}" for k, v in facts.items()), flush=True)
    began = time.perf_counter()
    results: dict[str, list[harness.Measurement]] = {}
    for workload in args.workloads:
        print(f"{workload}:", flush=True)
        if workload == "w1":
            from bench import w1_recursion

            only = [g for g in args.graphs.split(",") if g]
            results[workload] = w1_recursion.run(
                args.repeat, args.scale, args.programs.split(","), only, policy
            )
        elif workload == "w2":
            from bench import w2_epochs

            results[workload] = w2_epochs.run(
                args.repeat,
                args.readings,
                args.hours,
                args.samples,
                batch_peer=not args.no_hand_written,
                policy=policy,
                provenance=args.provenance,
            )
        elif workload == "w3":
            from bench import w3_actions

            results[workload] = w3_actions.run(args.repeat, args.actions)
        else:
            parser.error(f"unknown workload {workload!r} (w1, w2, w3)")
    print()
    print(f"python -m bench {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"medians of {args.repeat} runs; {time.perf_counter() - began:.0f} s in all")
    for workload, ms in results.items():
        print(f"\n{workload}\n")
        print(harness.table(ms))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "machine": facts,
                    "argv": argv if argv is not None else sys.argv[1:],
                    "results": {w: [m.to_json() for m in ms] for w, ms in results.items()},
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
