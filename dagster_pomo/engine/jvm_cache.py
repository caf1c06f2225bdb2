"""``pomo jvm-cache``: make the class-data archive that later local Spark sessions start on.

A local session evaluates a few hourly water-tank epochs (Parquet reads and writes,
shuffles, broadcasts, Python workers: the classes a run loads), then its JVM is asked to
exit and writes the classes it loaded; once it has exited cleanly the archive takes its
final name (see ``engine.spark.class_archive``).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dagster_pomo.errors import UsageError

EXIT_SECONDS = 600  # writing the archive takes a while on a slow disk


def make_archive(corpus: Path, events: Callable[[Path], None], epoch: int) -> int:
    """Record the classes a session loads while it evaluates ``corpus`` over the events
    ``events`` writes (to the file it is given), in epochs of ``epoch`` milliseconds."""
    from pyspark import SparkContext

    from dagster_pomo.engine.driver import Driver
    from dagster_pomo.engine.inputs import prepare
    from dagster_pomo.engine.java import require_java
    from dagster_pomo.engine.settings import JAVA_OPTIONS, SparkSettings
    from dagster_pomo.engine.spark.class_archive import archive_for, staged
    from dagster_pomo.engine.spark.session import session_conf, spark_session
    from dagster_pomo.lang import load_program

    if SparkContext._gateway is not None:
        raise UsageError("a JVM already runs in this process; run `pomo jvm-cache` on its own")
    began = time.perf_counter()
    java = require_java()
    target = archive_for(java, session_conf(SparkSettings()))
    partial = staged(target)
    # The JVM names each class it cannot keep (signed JARs, generated ones): not news.
    options = f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds*=error"
    settings = SparkSettings(conf={JAVA_OPTIONS: options})
    print(f"starting Spark on {java.path} (Java {java.major}) to record the classes it loads")
    try:
        spark = spark_session(settings)
        program = load_program(corpus)
        with tempfile.TemporaryDirectory(prefix="pomo-jvm-cache-") as tmp:
            landing = Path(tmp) / "landing"
            landing.mkdir()
            events(landing / "events.jsonl")
            prepared = prepare(program, landing, epoch)
            driver = Driver.for_run(program, prepared, f"{tmp}/warehouse", session=spark)
            for epoch in driver.epochs:
                driver.evaluate_epoch(epoch)
            derived = [r.name for r in program.catalog if r.derived]
            if derived:  # and reads results back, as `pomo run` does
                driver.versions(derived[-1])
        spark.stop()
        jvm = SparkContext._gateway.proc  # type: ignore[union-attr]
        jvm.stdin.close()  # the JVM exits when this process's end of the pipe closes
        code = jvm.wait(timeout=EXIT_SECONDS)
        if code != 0 or not partial.is_file() or partial.stat().st_size == 0:
            print(f"pomo: error: the JVM exited with {code} and wrote no archive", file=sys.stderr)
            return 1
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    size = target.stat().st_size / 2**20
    print(f"{target}: {size:,.0f} MB, made in {time.perf_counter() - began:.0f} s")
    print(
        "local Spark sessions started with this Java and PySpark now load Spark's classes "
        "from it (unless spark.driver.extraJavaOptions is set); delete the file to stop"
    )
    return 0
