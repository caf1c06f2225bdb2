"""How the one Spark session is configured."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from dagster_pomo.engine.settings import QUICK_JIT, SHORT_READ, SparkSettings
from dagster_pomo.engine.spark.session import DEFAULT_CONF, session_conf


def test_a_connect_server_is_sent_session_settings_only() -> None:
    """A Spark Connect server fixed its JVM, UI and console when it started; sending it
    the local defaults for those only makes Spark warn on every run. Session defaults
    and everything the user asks for still go."""
    local = session_conf(SparkSettings())
    assert local == DEFAULT_CONF
    remote = session_conf(SparkSettings(remote="sc://spark:15002"))
    assert remote["spark.sql.session.timeZone"] == "UTC"
    assert remote["spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version"] == "2"
    for launch_only in ("spark.driver.memory", "spark.ui.enabled", "spark.default.parallelism"):
        assert launch_only in local and launch_only not in remote
    assert session_conf(SparkSettings(remote="local")) == local, "a server started here"
    mine = {"spark.driver.memory": "8g", "spark.sql.shuffle.partitions": "16"}
    asked = session_conf(SparkSettings(remote="sc://spark:15002", conf=mine))
    assert asked["spark.driver.memory"] == "8g" and asked["spark.sql.shuffle.partitions"] == "16"


def test_a_column_function_is_one_call_into_the_jvm() -> None:
    """An epoch builds thousands of columns; PySpark asks the JVM what a class and its
    method are before each call. The session remembers both: one round trip per column,
    with the same results (and a static field is still read afresh each time); so does
    a table of rows handed to Spark."""
    import pyarrow as pa
    from pyspark import SparkContext
    from pyspark.sql import functions as F

    from bench.epoch_profile import JvmCalls, counting
    from dagster_pomo.engine.spark.lookups import remember_lookups
    from dagster_pomo.engine.spark.session import LazySession, spark_session

    spark = spark_session()
    F.col("a"), F.lit(1), F.max("a")  # the first use of each looks it up
    with counting(JvmCalls()) as calls:
        F.col("a"), F.lit(1), F.max("a")
    # Calls from other threads (the release of objects Python no longer holds) may interleave.
    assert calls.lookups == 0
    assert calls.count - calls.released == 4  # col, lit, and max over the column "a" names
    assert spark.range(5).select(F.max("id") + F.lit(1)).first()[0] == 5
    table = pa.table({"a": pa.array([1, 2], pa.int64())})
    assert spark.createDataFrame(table, "a long").count() == 2  # a table of rows too
    with counting(JvmCalls()) as calls:
        spark.createDataFrame(table, "a long")
    assert calls.lookups == 0
    for lazy in (LazySession(SparkSettings()), LazySession(SparkSettings(), "no Spark here")):
        remember_lookups(lazy)  # a session yet to start is neither started nor asked
        assert not lazy.started
    jvm = SparkContext._jvm
    with counting(JvmCalls()) as calls:
        assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
        assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
    assert calls.lookups >= 2, "a field's value is asked for each time"


def test_python_workers_talk_to_spark_over_unix_sockets() -> None:
    """Every task of a Python function (the aggregates, content IDs) is handed to a Python
    worker over a connection; a Unix domain socket spares the TCP connection and its
    handshake each time, ~55 ms of a small job (BENCHMARKS.md). The workers Spark started
    for this session listen and talk on Unix sockets and on no TCP one."""
    import psutil
    import pyarrow as pa

    from dagster_pomo.engine.spark.session import spark_session

    def same(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from batches

    rows = spark_session().range(3, numPartitions=1).mapInArrow(same, "id long").collect()
    assert [r.id for r in rows] == [0, 1, 2]

    def named(process: psutil.Process) -> str:
        try:
            return " ".join(process.cmdline())
        except psutil.Error:  # gone, or a worker that exited and is not yet reaped
            return ""

    daemons = [p for p in psutil.Process().children(recursive=True) if "pyspark.daemon" in named(p)]
    assert daemons, "Spark started its Python workers' daemon"
    for daemon in daemons:
        assert daemon.net_connections(kind="unix"), "the daemon listens on a Unix socket"
        for process in (daemon, *daemon.children(recursive=True)):
            try:
                inet = process.net_connections(kind="inet")
            except psutil.Error:  # a worker that has just exited
                continue
            assert not inet, named(process)


SMALL_EPOCH = """
import json, sys
from pathlib import Path
from dagster_pomo.engine.actions import subscriptions
from dagster_pomo.engine.pipeline import Pipeline, Storage
from dagster_pomo.examples import DEFAULT_START, HOUR, outbox_handlers, water_tank_events
from dagster_pomo.lang import load_program
from dagster_pomo.plan.units import units
from dagster_pomo.timeline import epochs

work, corpus = Path(sys.argv[1]), Path(sys.argv[2])
water_tank_events(work / "landing" / "r.jsonl", 2_000, hours=2)
program = load_program(corpus)
pipeline = Pipeline(program, Storage(str(work / "wh"), str(work / "landing")))
handlers = outbox_handlers(corpus, work / "outbox.sqlite")
history = epochs(DEFAULT_START, DEFAULT_START + 2 * HOUR, HOUR)
made = {}
for last in (1, 2):  # as Airflow tasks or scheduled Dagster runs do, epoch by epoch
    driver, run = pipeline.driver(history[:last], 1)
    pipeline.land(driver, run)
    for unit in units(program):
        for name, n in pipeline.evaluate(driver, unit, run).rows.items():
            made[name] = made.get(name, 0) + n
    for name in subscriptions(program):
        pipeline.act(name, handlers[name], run)
from pyspark import SparkContext
print(json.dumps({"spark": SparkContext._active_spark_context is not None, "made": made}))
"""


def test_small_epochs_run_their_steps_without_starting_spark(tmp_path) -> None:
    """A fresh process running a scheduled step of small epochs (inputs, every unit, the
    handlers: an Airflow task, a Dagster run of one partition) works them out here and
    starts no JVM: Spark starts only when a plan needs it."""
    import json
    import subprocess
    import sys

    from dagster_pomo.examples import DEFAULT_START, HOUR
    from tests.compare import window_versions
    from tests.conftest import ROOT, RULES

    (tmp_path / "landing").mkdir()
    script = [sys.executable, "-c", SMALL_EPOCH, str(tmp_path), str(RULES / "water_tanks.pomo")]
    done = subprocess.run(script, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["spark"] is False, "no Spark context in the process"
    lines = (tmp_path / "landing" / "r.jsonl").read_text().splitlines()
    versions = window_versions(lines, 10 * 60_000, DEFAULT_START + 2 * HOUR)
    assert found["made"]["level_10m"] == versions and found["made"]["level_per_minute"] > 0


FIRST_PLANS = """.decl e(x: int, y: int);
.decl path(x: int, y: int);
path(x, y) := e(x, y);
path(x, z) := path(x, y) ^ e(y, z);
.decl minutes(x: int);
minutes(x) := clock(offset, period) @time(_tick) ^ e(x, _) where offset = 0, period = 1m;
.decl seen(x: int, n: int);
seen(x, 1) @next := e(x, _) ^ !seen(x, _);
seen(x, n) @next := seen(x, n);
"""


QUICK_RUN = """
import json, sys
from pyspark import SparkContext
from dagster_pomo.cli.main import main
from dagster_pomo.engine import settings
settings.SHORT_READ = int(sys.argv[1])
code = main(sys.argv[2:])
context = SparkContext._active_spark_context
jvm = context._jvm
hotspot = jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
flags = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(hotspot)
print(json.dumps({
    "code": code,
    "options": context.getConf().get(settings.JAVA_OPTIONS, ""),
    "tier": int(flags.getVMOption("TieredStopAtLevel").getValue()),
    "code_cache": int(flags.getVMOption("ReservedCodeCacheSize").getValue()),
}))
"""


def test_a_fresh_process_starts_spark_for_its_first_plans(tmp_path) -> None:
    """A new `pomo run` whose first Spark plans are a recursion, clock ticks and `@next`
    rules (column functions built before anything else asks Spark) starts the session
    for them, in one pass and epoch by epoch, and writes what the reference writes. Having
    read at most `SHORT_READ` lines (12), it starts the JVM on the JIT's quick tier, with
    the room for compiled code both tiers have (on the quick tier alone the JVM reserves a
    fifth of it, which Spark's code fills within a minute: the JVM then stops compiling);
    with the limit lowered to 11 (the epoch-by-epoch process), on the optimizing tier."""
    import json
    import subprocess
    import sys

    (tmp_path / "c.pomo").write_text(FIRST_PLANS)
    lines = [{"relation": "e", "t": i * 600_000, "args": [i, i + 1]} for i in range(12)]
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    pomo = Path(sys.executable).with_name("pomo")
    run = ["run", "c.pomo", "--events", "e.jsonl", "--epoch", "1h", "--times", "any"]
    reference = [str(pomo), *run, "--engine", "reference", "--out", "reference"]
    done = subprocess.run(reference, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    outs = {"reference": _outputs(tmp_path / "reference")}
    # the JVM's options as `pomo run` picks them, not the tests' (conftest.py)
    own_options = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
    for name, limit, quick, extra in (
        ("one-pass", SHORT_READ, True, []),
        ("epoch-by-epoch", 11, False, ["--epoch-by-epoch"]),
    ):
        args = [sys.executable, "-c", QUICK_RUN, str(limit), *run, *extra, "--out", name]
        done = subprocess.run(
            args, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=own_options
        )
        assert done.returncode == 0, done.stderr[-4000:]
        said = json.loads(done.stdout.splitlines()[-1])
        assert said["code"] == 0
        assert (QUICK_JIT in said["options"]) is quick, (name, said)
        # what the JVM runs with (the tiers' defaults when it is not quick)
        assert said["tier"] == (1 if quick else 4), (name, said)
        assert said["code_cache"] >= 240 * 2**20, (name, said)
        outs[name] = _outputs(tmp_path / name)
    assert outs["reference"]["path.jsonl"].count("\n") == 78  # 12 edges: 12 + 11 + ... + 1
    assert outs["one-pass"] == outs["reference"]
    assert outs["epoch-by-epoch"] == outs["reference"]


SMALL_RUN = """
import json, sys
from pyspark import SparkContext
from dagster_pomo.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "spark": SparkContext._active_spark_context is not None}))
"""


def test_a_small_range_runs_and_writes_its_outputs_without_starting_spark(tmp_path) -> None:
    """`pomo run --out` over a few small hours of a corpus this process can work out (no
    recursion, no `@next`) takes them epoch by epoch here rather than in one Spark pass,
    and writes the few events it derived from here: no JVM starts, and the files hold
    what the reference evaluator writes."""
    import json
    import subprocess
    import sys

    from dagster_pomo.examples import water_tank_events
    from tests.conftest import ROOT, RULES

    water_tank_events(tmp_path / "r.jsonl", 1_500, hours=3)
    outs = {}
    for engine in ("auto", "reference"):
        args = ["run", str(RULES / "water_tanks.pomo"), "--events", str(tmp_path / "r.jsonl")]
        args += ["--engine", engine, "--out", str(tmp_path / engine)]
        script = [sys.executable, "-c", SMALL_RUN, *args]
        done = subprocess.run(script, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-4000:]
        found = json.loads(done.stdout.strip().splitlines()[-1])
        assert found == {"code": 0, "spark": False}, (engine, done.stderr[-4000:])
        outs[engine] = {
            # Floats to 9 places: engines sum an average's terms in different orders.
            p.name: [
                json.loads(line, parse_float=lambda f: round(float(f), 9)) for line in p.open()
            ]
            for p in sorted((tmp_path / engine).glob("*.jsonl"))
        }
    assert len(outs["auto"]["level_10m.jsonl"]) > 1_000
    assert outs["auto"] == outs["reference"]


def test_a_run_that_read_few_lines_takes_the_quick_compiler_in_a_new_local_jvm() -> None:
    """`pomo run`'s settings for a run that read at most `SHORT_READ` lines: the JIT's quick
    tier (its effect on a real run: `test_a_fresh_process_starts_spark_for_its_first_plans`);
    remote Spark and Java options the user sets are left alone."""
    from dagster_pomo.engine.settings import JAVA_OPTIONS

    local = SparkSettings()
    assert local.for_lines(SHORT_READ).conf == {JAVA_OPTIONS: QUICK_JIT}
    assert local.for_lines(SHORT_READ + 1) == local
    assert SparkSettings(remote="sc://spark:15002").for_lines(1).conf == {}
    assert SparkSettings(master="spark://host:7077").for_lines(1).conf == {}
    mine = SparkSettings(conf={JAVA_OPTIONS: "-Xss4m"})
    assert mine.for_lines(1) == mine


def _outputs(folder: Path) -> dict[str, str]:
    """The text of each output file a run wrote to ``folder``, by name."""
    return {p.name: p.read_text() for p in sorted(folder.glob("*.jsonl"))}
