"""Where a warm epoch's time goes: ``python -m bench.epoch_profile``.

Runs the W2 water tanks epoch by epoch in one process (local Spark only) and prints, for
each epoch, its seconds and Spark jobs, the calls the driver made into the JVM (short ones
build plans and read schemas; long ones run jobs and writes; seconds summed over the
threads of strata that run at once), how many classes Spark's
code generator compiled, the CPU time of the driver JVM and how much of it its JIT
compilers took (Linux), and each stratum's seconds. For the last epoch it lists every
Spark job with its stages: tasks, wall time, the tasks' run and CPU time, and rows read,
shuffled and written; then the warm epochs' CPU by who spent it (the JVM's compilers,
garbage collector, Spark's tasks and the rest of the JVM; Spark's Python workers; this
process). ``--java-options`` starts the driver's JVM with those options; ``--callers``
adds which engine functions made the short calls; ``--again N``
evaluates the last epoch N times more, when Spark has compiled its generated code
already (the epoch's bounds are literals in it, so a new epoch's code is compiled anew):
what an epoch would cost if its plans were compiled once. A fixed cost
that is spread over many small parts shows here, where a sampling profiler of the
Python process sees only waiting.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import statistics
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import TICK, descendants, proc_stat, thread_cpu

SHORT = 0.03  # a JVM call under 30 ms builds or asks; a longer one runs a job
# The JVM's threads by what they do, from the start of their (15-character) Linux names.
ROLES = (
    ("JIT compilers", ("C1 CompilerThre", "C2 CompilerThre")),
    ("garbage collector", ("GC Thread", "G1 ")),
    ("Spark tasks", ("Executor task",)),
)


@dataclass
class JvmCalls:
    """The driver's calls into the JVM while counting (from any thread)."""

    callers: bool = False
    count: int = 0
    lookups: int = 0  # of which questions about what a name is (reflection)
    released: int = 0  # and objects Python let go of (sent from a thread of their own)
    short_seconds: float = 0.0
    long_seconds: float = 0.0
    by_caller: collections.Counter[str] = field(default_factory=collections.Counter)

    def reset(self) -> None:
        self.count, self.lookups, self.released = 0, 0, 0
        self.short_seconds, self.long_seconds = 0.0, 0.0
        self.by_caller.clear()

    def _seen(self, command: str, seconds: float) -> None:
        self.count += 1
        self.lookups += command.startswith("r\n")
        self.released += command.startswith("m\nd\n")
        if seconds < SHORT:
            self.short_seconds += seconds
        else:
            self.long_seconds += seconds
        if self.callers:
            for frame in reversed(traceback.extract_stack(limit=40)):
                if "dagster_pomo" in frame.filename:
                    self.by_caller[f"{Path(frame.filename).stem}.{frame.name}"] += 1
                    break


@contextmanager
def counting(calls: JvmCalls) -> Iterator[JvmCalls]:
    """Count every command PySpark sends to the JVM, and how long each took."""
    from py4j.java_gateway import GatewayClient

    send = GatewayClient.send_command

    def timed(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return send(self, command, *args, **kwargs)
        finally:
            calls._seen(command, time.perf_counter() - began)

    GatewayClient.send_command = timed  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        GatewayClient.send_command = send  # type: ignore[method-assign]


JVM_ROLES = (*(r for r, _ in ROLES), "rest of the JVM")


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds so far: of each driver JVM thread by id (with its role), of the whole
    JVM (threads that have ended included), of the processes under it and of this one."""

    threads: dict[str, tuple[str, float]]
    jvm: float
    workers: float
    here: float


def cpu_snapshot(jvm: int) -> CpuSnapshot:
    """Where there is no ``/proc`` only this process's CPU is known."""
    threads = {
        tid: (next((r for r, starts in ROLES if name.startswith(starts)), "rest of the JVM"), s)
        for tid, (name, s) in thread_cpu(jvm).items()
    }
    read = proc_stat(f"/proc/{jvm}/stat")
    total = (int(read[1][11]) + int(read[1][12])) / TICK if read is not None else 0.0
    workers = 0.0
    for pid in descendants(jvm):
        if (child := proc_stat(f"/proc/{pid}/stat")) is not None:
            workers += sum(int(f) for f in child[1][11:15]) / TICK
    times = os.times()
    return CpuSnapshot(threads, total, workers, times.user + times.system)


def cpu_by_role(before: CpuSnapshot, after: CpuSnapshot) -> collections.Counter[str]:
    """CPU seconds spent between two snapshots by role (see ROLES), "Python workers" (the
    daemon and the workers it forks, with those that exited) and "this process". A named
    role counts its threads one by one (a thread that started in between from zero); "rest
    of the JVM" is the JVM's whole CPU less the named roles', so a thread that ended in
    between (an idle task thread let go) is counted there rather than taken off."""
    out: collections.Counter[str] = collections.Counter()
    for tid, (role, seconds) in after.threads.items():
        if role != "rest of the JVM":
            out[role] += seconds - before.threads.get(tid, (role, 0.0))[1]
    out["rest of the JVM"] = max(0.0, after.jvm - before.jvm - sum(out.values()))
    out["Python workers"] = max(0.0, after.workers - before.workers)
    out["this process"] = after.here - before.here
    return out


def group_jobs(spark: Any, group: str) -> set[int]:
    """The ids of the Spark jobs of a job group so far."""
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def epoch_jobs(spark: Any, group: str, earlier: set[int]) -> list[dict[str, Any]]:
    """The Spark jobs of one job group but ``earlier`` ones (an epoch evaluated before in the
    process has the same group), each with its stages, from Spark's status store."""
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = []
    for job_id in sorted(group_jobs(spark, group) - earlier):
        job = store.job(job_id)
        stages = []
        ids = job.stageIds()
        for k in range(ids.size()):
            try:
                stage = store.lastStageAttempt(ids.apply(k))
            except Exception:  # noqa: BLE001 (skipped stages have no attempt)
                continue
            if stage.submissionTime().isEmpty() or stage.completionTime().isEmpty():
                continue
            stages.append(
                {
                    "stage": stage.stageId(),
                    "tasks": stage.numTasks(),
                    "wall_ms": _millis(stage),
                    "run_ms": stage.executorRunTime(),
                    "cpu_ms": stage.executorCpuTime() // 1_000_000,
                    "rows_in": stage.inputRecords(),
                    "shuffled": stage.shuffleWriteRecords(),
                    "rows_out": stage.outputRecords(),
                }
            )
        jobs.append({"job": job_id, "wall_ms": _millis(job), "stages": stages})
    return jobs


def _millis(data: Any) -> int:
    return int(data.completionTime().get().getTime() - data.submissionTime().get().getTime())


def _compiles(spark: Any) -> tuple[int, float]:
    """Classes compiled by Spark's code generator so far, and their recent mean ms."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    histogram = metrics.METRIC_COMPILATION_TIME()
    return int(histogram.getCount()), float(histogram.getSnapshot().getMean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.epoch_profile", description=__doc__)
    parser.add_argument("--readings", type=int, default=120_000)
    parser.add_argument("--hours", type=int, default=12, help="hourly epochs")
    parser.add_argument(
        "--concurrency", type=int, default=2, help="strata at once (1: one after another)"
    )
    parser.add_argument("--callers", action="store_true", help="short JVM calls by caller")
    parser.add_argument("--java-options", default="", help="driver JVM options")
    parser.add_argument(
        "--again",
        type=int,
        default=0,
        help="evaluate the last epoch this many times more (its code is compiled by then)",
    )
    harness.spark_plans_option(parser)
    args = parser.parse_args(argv)
    policy = harness.policy_of(args)
    if args.hours < 1 or args.readings < 1 or args.again < 0:
        parser.error("--hours and --readings must be at least 1, --again at least 0")

    from bench.w2_epochs import CORPUS, START
    from dagster_pomo.engine.driver import Driver
    from dagster_pomo.engine.inputs import prepare
    from dagster_pomo.engine.settings import JAVA_OPTIONS, SparkSettings
    from dagster_pomo.engine.spark.lookups import is_connect
    from dagster_pomo.engine.spark.session import spark_session
    from dagster_pomo.examples import HOUR, water_tank_events
    from dagster_pomo.lang import load_program
    from dagster_pomo.timeline import epoch_key

    conf = {JAVA_OPTIONS: args.java_options} if args.java_options else {}
    spark = spark_session(dataclasses.replace(SparkSettings.from_env(), conf=conf))
    if is_connect(spark):
        parser.error("the profile reads the driver's JVM: it needs local Spark, not Connect")
    program = load_program(CORPUS)
    calls = JvmCalls(callers=args.callers)
    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    with tempfile.TemporaryDirectory(prefix="pomo-profile-") as tmp:
        landing = Path(tmp) / "landing"
        landing.mkdir()
        water_tank_events(
            landing / "r.jsonl", args.readings, tanks=3, hours=args.hours, start=START
        )
        until = START + args.hours * HOUR
        prepared = prepare(program, landing, HOUR, start=START, until=until)
        evaluator = Driver.for_run(program, prepared, f"{tmp}/wh", policy=policy, session=spark)
        evaluator.concurrency = max(1, args.concurrency)
        print(
            f"{args.readings:,} readings over {args.hours} hourly epochs, "
            f"{evaluator.concurrency} strata at once"
        )
        print(
            "epoch  seconds  jobs  JVM calls  lookups  short s  long s  compiles"
            "  JVM cpu s  JIT s  strata (s)"
        )
        group, earlier, mean_ms = "", set(), 0.0

        def one(label: str, epoch: Any) -> collections.Counter[str]:
            """Evaluate ``epoch``, print its row; its CPU seconds by role."""
            nonlocal group, earlier, mean_ms
            group = f"pomo-{program.name}-{epoch_key(epoch)}"
            earlier = group_jobs(spark, group)
            calls.reset()
            compiled, _ = _compiles(spark)
            before = cpu_snapshot(jvm)
            stats = evaluator.evaluate_epoch(epoch)
            cpu_after = cpu_by_role(before, cpu_snapshot(jvm))
            compiled_after, mean_ms = _compiles(spark)
            cpu_after["seconds"] = stats.seconds
            jvm_cpu = sum(v for k, v in cpu_after.items() if k in JVM_ROLES)
            strata = ", ".join(f"{s.relations[0]} {s.seconds:.2f}" for s in stats.strata)
            print(
                f"{label:>5}  {stats.seconds:7.2f}  {stats.spark_jobs:4}  {calls.count:9,}"
                f"  {calls.lookups:7,}"
                f"  {calls.short_seconds:7.2f}  {calls.long_seconds:6.2f}"
                f"  {compiled_after - compiled:8}  {jvm_cpu:9.2f}"
                f"  {cpu_after['JIT compilers']:5.2f}  {strata}"
            )
            return cpu_after

        with counting(calls):
            spent = [one(str(i), e) for i, e in enumerate(evaluator.epochs, start=1)]
            print(f"the last epoch's Spark jobs (codegen: about {mean_ms:.0f} ms a class):")
            for job in epoch_jobs(spark, group, earlier):
                print(f"  job {job['job']}: {job['wall_ms']} ms")
                for s in job["stages"]:
                    print(
                        f"    stage {s['stage']}: {s['tasks']} tasks, {s['wall_ms']} ms"
                        f" (tasks ran {s['run_ms']} ms, CPU {s['cpu_ms']} ms); rows in"
                        f" {s['rows_in']:,}, shuffled {s['shuffled']:,}, out {s['rows_out']:,}"
                    )
            callers = collections.Counter(calls.by_caller)
            again = [one("again", evaluator.epochs[-1]) for _ in range(args.again)]
    _summary(f"the last {len(spent) - len(spent) // 2} epochs", spent[len(spent) // 2 :])
    if again:
        _summary("the last epoch evaluated again (its classes compiled already)", again)
    if args.callers:
        print("the last epoch's JVM calls by engine function:")
        for caller, n in callers.most_common(15):
            print(f"  {n:6,}  {caller}")
    return 0


def _summary(what: str, spent: list[collections.Counter[str]]) -> None:
    """The median seconds and CPU seconds by role of some epochs' runs."""
    print(f"median of {what}: {statistics.median(c['seconds'] for c in spent):.2f} s; CPU s:")
    for role in [*JVM_ROLES, "Python workers", "this process"]:
        print(f"  {statistics.median(c[role] for c in spent):6.2f}  {role}")


if __name__ == "__main__":
    raise SystemExit(main())
