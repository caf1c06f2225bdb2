"""What a round of a recursion costs on Spark, with its delta one row: the counter
``c(x + 1, n) := c(x, _) ^ c(_, n) if x < n`` (not linear: it joins its relation with
itself, on no shared variable) in an epoch Spark works out (`Policy(in_process_inputs=0)`).

In one process and Spark application, after a warm-up: the counter to ``--small`` and to
``--large`` rounds with the later rounds in one Spark task (as shipped), and on Spark's
plans (`Policy(task_rows=0)`, the peer; to ``--plans-large``, as it takes a job and a plan
a round). A round's cost is the difference of two sizes' times over the difference of
their rounds, so the first round's plans and the epoch's fixed costs drop out. Every run's
versions are checked against the counter's. ``--cluster``: the same on a standalone
cluster started here, whose executors have the project; with ``POMO_SPARK_REMOTE`` set
(``local``: a Spark Connect server started here), under Spark Connect.

``--closure``: instead, the closure ``p(x, z) := p(x, y) ^ e(y, z)`` of a chain of
``--small`` and ``--large`` edges (a round a node; the last round's paths grow with the
chain), its tasks allowed ``--task-rows`` versions each, fewer than the closure has: the
rounds go on in more tasks, spread on ``x`` (as shipped), against Spark's plans.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench.standalone import on_cluster, standalone
from dagster_pomo.engine.driver import Driver
from dagster_pomo.engine.inputs import prepare
from dagster_pomo.engine.lines import ANY_TIME
from dagster_pomo.engine.policy import Policy
from dagster_pomo.lang import compile_corpus

COUNTER = """.decl c(x: int, n: int);
c(0, {n});
c(x + 1, n) := c(x, _) ^ c(_, n) if x < n;
"""
CLOSURE = """.decl e(x: int, y: int);
p(x, y) := e(x, y);
p(x, z) := p(x, y) ^ e(y, z);
"""
ON_SPARK = Policy(in_process_inputs=0)


def timed(work: Path, n: int, how: Policy, closure: bool = False) -> float:
    """Seconds the counter's epoch takes to ``n`` rounds, or with ``closure`` the closure of a
    chain of ``n`` edges (its stratum on Spark, its versions checked)."""
    corpus, name = (CLOSURE, "p") if closure else (COUNTER.format(n=n), "c")
    program = compile_corpus(corpus, "rounds.pomo")
    events = None
    if closure:
        events = work / f"chain-{n}.jsonl"
        events.parent.mkdir(parents=True, exist_ok=True)
        lines = (json.dumps({"relation": "e", "t": 1, "args": [i, i + 1]}) for i in range(n))
        events.write_text("".join(line + "\n" for line in lines))
    prepared = prepare(program, events, 100, 0, 100, ANY_TIME)
    driver = Driver.for_run(program, prepared, str(work / f"wh-{n}-{how.task_rows}"), how)
    started = time.perf_counter()
    stats = driver.evaluate_epoch(driver.epochs[0])
    seconds = time.perf_counter() - started
    (stratum,) = [s for s in stats.strata if s.relations == (name,)]
    assert not stratum.in_process, stratum
    versions = sorted(v.args for v in driver.versions(name))
    if closure:
        assert versions == [(x, y) for x in range(n) for y in range(x + 1, n + 1)]
    else:
        assert stratum.rounds == n + 1, stratum
        assert versions == [(x, n) for x in range(n + 1)]
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_rounds", description=__doc__)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--large", type=int, default=1000)
    parser.add_argument("--plans-large", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--cluster", action="store_true", help="on a standalone cluster of two one-core workers"
    )
    parser.add_argument(
        "--closure", action="store_true", help="a chain's closure, past what a task may know"
    )
    parser.add_argument("--task-rows", type=int, default=2000, help="with --closure")
    args = parser.parse_args(argv)
    if args.cluster:
        given = sys.argv[1:] if argv is None else argv
        return _on_cluster([a for a in given if a != "--cluster"])
    plans = replace(ON_SPARK, task_rows=0)
    shipped, name = ON_SPARK, "rounds in one task"
    if args.closure:
        shipped = replace(ON_SPARK, task_rows=args.task_rows)
        name = f"rounds in tasks, spread past task_rows={args.task_rows:,}"
    with tempfile.TemporaryDirectory(prefix="pomo-rounds-") as tmp:
        work = Path(tmp)
        timed(work / "warm", args.small, shipped, args.closure)
        timed(work / "warm", args.small, plans, args.closure)
        rows = []
        for label, how, large in (
            (name, shipped, args.large),
            ("Spark's plans (task_rows=0)", plans, args.plans_large),
        ):
            small_s, large_s = [], []
            for i in range(args.repeat):
                small_s.append(timed(work / f"{i}", args.small, how, args.closure))
                large_s.append(timed(work / f"{i}", large, how, args.closure))
            small_m, large_m = (
                sorted(small_s)[len(small_s) // 2],
                sorted(large_s)[len(large_s) // 2],
            )
            per = (large_m - small_m) / (large - args.small)
            rows.append((label, args.small, small_m, large, large_m, per))
    print("| rounds | epoch, small | epoch, large | a round |")
    print("| --- | ---: | ---: | ---: |")
    for name, small, small_m, large, large_m, per in rows:
        print(
            f"| {name} | {small_m:.2f} s ({small + 1} rounds) | {large_m:.2f} s "
            f"({large + 1} rounds) | {per * 1000:.1f} ms |"
        )
    return 0


def _on_cluster(argv: list[str]) -> int:
    """This benchmark in a process of its own whose Spark runs on a standalone cluster
    started here (its executors' Python is this one, which has the project)."""
    with tempfile.TemporaryDirectory(prefix="pomo-rounds-cluster-") as tmp:
        with standalone(Path(tmp)) as master:
            if master is None:
                print("the standalone cluster did not start")
                return 1
            print(f"on a standalone cluster ({master}), two one-core workers")
            command = [sys.executable, "-m", "bench.spark_rounds", *argv]
            return subprocess.run(command, env=on_cluster(master), check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
