"""What a fresh process pays, as a scheduled Dagster run does: ``python -m bench.cold_start``.

A run of one partition starts Python, then Spark's JVM, stores its inputs and evaluates
an epoch or a few, all with a cold JIT compiler. This prints each step's time and, on
Linux, the CPU the JVM's threads used while the epochs ran, by kind of thread (the JIT
compiler's, the tasks', the garbage collector's). ``--java-options`` passes options to
the driver JVM (``spark.driver.extraJavaOptions``), to compare e.g.
``-XX:TieredStopAtLevel=1`` (they replace the class-data archive of ``pomo jvm-cache``,
which a local session otherwise starts on when there is one); ``--remote`` runs against a
Spark Connect server instead, whose JVM outlives the process (its threads are then not
this process's to count). Run it once per setting: the point is a new process.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from bench import harness
from bench.harness import proc_stat, thread_cpu


def _jvm_threads() -> dict[str, tuple[str, float]]:
    """Each thread of this process's Spark JVM: its kind (digits dropped) and CPU seconds."""
    mine = str(os.getpid())

    def is_my_jvm(p: Path) -> bool:
        read = proc_stat(p / "stat")  # other processes come and go while we look
        if read is None or read[1][1] != mine:
            return False
        try:
            return b"java" in (p / "cmdline").read_bytes()
        except OSError:
            return False

    jvms = [p for p in Path("/proc").iterdir() if p.name.isdigit() and is_my_jvm(p)]
    out: dict[str, tuple[str, float]] = {}
    for jvm in jvms:
        for thread, (name, seconds) in thread_cpu(int(jvm.name)).items():
            out[f"{jvm.name}/{thread}"] = (re.sub(r"[0-9]+", "#", name), seconds)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cold_start", description=__doc__)
    parser.add_argument("--readings", type=int, default=30_000)
    parser.add_argument("--hours", type=int, default=3, help="hourly epochs")
    parser.add_argument("--java-options", default="", help="driver JVM options")
    parser.add_argument(
        "--remote", default=None, help="a Spark Connect URL (sc://host:port) to use instead"
    )
    harness.spark_plans_option(parser)
    args = parser.parse_args(argv)
    policy = harness.policy_of(args)
    began = time.perf_counter()

    from bench.w2_epochs import CORPUS, START
    from dagster_pomo.engine.driver import Driver
    from dagster_pomo.engine.inputs import prepare
    from dagster_pomo.engine.settings import JAVA_OPTIONS, SparkSettings
    from dagster_pomo.engine.spark.session import spark_session
    from dagster_pomo.examples import HOUR, water_tank_events
    from dagster_pomo.lang import load_program

    steps: list[tuple[str, float]] = [("imports", time.perf_counter() - began)]
    clock = time.perf_counter()
    conf = {JAVA_OPTIONS: args.java_options} if args.java_options else {}
    spark = spark_session(SparkSettings(remote=args.remote, conf=conf))
    steps.append(("starting Spark", time.perf_counter() - clock))
    program = load_program(CORPUS)
    with tempfile.TemporaryDirectory(prefix="pomo-cold-") as tmp:
        landing = Path(tmp) / "landing"
        landing.mkdir()
        until = START + args.hours * HOUR
        water_tank_events(
            landing / "r.jsonl", args.readings, tanks=3, hours=args.hours, start=START
        )
        clock = time.perf_counter()
        prepared = prepare(program, landing, HOUR, start=START, until=until)
        evaluator = Driver.for_run(program, prepared, f"{tmp}/wh", policy=policy, session=spark)
        steps.append(("reading and storing the inputs", time.perf_counter() - clock))
        before = _jvm_threads() if sys.platform == "linux" else {}
        for index, epoch in enumerate(evaluator.epochs, start=1):
            clock = time.perf_counter()
            evaluator.evaluate_epoch(epoch)
            steps.append((f"epoch {index}", time.perf_counter() - clock))
        after = _jvm_threads() if sys.platform == "linux" else {}
    given = "" if args.remote else spark.sparkContext.getConf().get(JAVA_OPTIONS, "")
    # Spark adds options of its own (module access and the like); ours are -XX ones.
    ours = [o for o in given.split() if o.startswith("-XX:") and "Unrecognized" not in o]
    print(f"spark: {args.remote or 'local'}; driver JVM options: {' '.join(ours) or '(none)'}")
    for step, seconds in steps:
        print(f"  {step:32} {seconds:7.2f} s")
    print(f"  {'in all':32} {time.perf_counter() - began:7.2f} s")
    by_kind: collections.Counter[str] = collections.Counter()
    for key, (kind, cpu) in after.items():
        by_kind[kind] += cpu - before.get(key, (kind, 0.0))[1]
    if by_kind:
        print("JVM CPU during the epochs, by thread:")
        for kind, cpu in by_kind.most_common(4):
            print(f"  {kind:32} {cpu:7.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
