"""Where Spark runs and what the project sets for its JVM: plain settings, no Spark.

The Dagster resource, the CLI and the benchmarks build these; the engine opens the
session from them (`engine.spark.session`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

# The Spark setting that holds the driver JVM's options.
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# The JIT compiler's quick tier only: a short run in a new JVM is over before the
# optimizing tier pays for itself (the Dagster resource, the Airflow tasks and `pomo run`
# pick it for short runs). On that tier alone the JVM reserves 48 MB for compiled code,
# not the 240 MB of both tiers; Spark's code fills that within a minute of small plans,
# and the JVM then stops compiling for good ("CodeCache is full. Compiler has been
# disabled"), running every method it had not compiled yet in its interpreter. So it
# gets the 240 MB both tiers have.
QUICK_JIT = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
# Driver Java options the project picks; a class-data archive is added to these, never
# to options the user sets (see `engine.spark.class_archive`).
OUR_JAVA_OPTIONS = frozenset({QUICK_JIT})
SHORT_RUN = 3  # epochs: a fresh process's first three were a fifth faster with QUICK_JIT
# Input lines: a `pomo run` on Spark's plans reading 500,000 lines took 14% less time with
# QUICK_JIT (120,000: 18% less), one reading 2,000,000 took 17% more.
SHORT_READ = 500_000


@dataclass(frozen=True)
class SparkSettings:
    """Where Spark runs. ``remote`` (Spark Connect) wins over ``master``."""

    master: str = "local[*]"
    remote: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    app_name: str = "dagster-pomo"

    @classmethod
    def from_env(cls) -> SparkSettings:
        """``POMO_SPARK_MASTER`` / ``POMO_SPARK_REMOTE`` override the local default."""
        return cls(
            master=os.environ.get("POMO_SPARK_MASTER", "local[*]"),
            remote=os.environ.get("POMO_SPARK_REMOTE") or None,
        )

    def for_epochs(self, epochs: int | None) -> SparkSettings:
        """These settings for a run of ``epochs`` epochs: a run of a few in a new local JVM
        is over before the JIT's optimizing tier pays for itself, so such runs compile with
        its quick tier only, unless ``conf`` sets the driver's Java options (measured in
        ``bench/cold_start.py``). What the Dagster resource and the Airflow tasks start."""
        return self._quick_if(epochs is not None and epochs <= SHORT_RUN)

    def for_lines(self, lines: int) -> SparkSettings:
        """These settings for a `pomo run` that read ``lines`` input lines in its process:
        its work, whatever the number of epochs (a range runs in one pass), is what decides
        whether the optimizing tier pays (`SHORT_READ`)."""
        return self._quick_if(lines <= SHORT_READ)

    def _quick_if(self, short: bool) -> SparkSettings:
        """The JIT's quick tier for a ``short`` run in a new local JVM, unless ``conf`` sets
        the driver's Java options."""
        local = not self.remote and self.master.startswith("local")
        if not short or not local or JAVA_OPTIONS in self.conf:
            return self
        return replace(self, conf={**self.conf, JAVA_OPTIONS: QUICK_JIT})


QUIET_LOGS = Path(__file__).with_name("quiet-log4j2.properties")


@contextmanager
def quiet_spark_logs(environ: MutableMapping[str, str] = os.environ) -> Iterator[None]:
    """Spark's and the JVM's own logging kept to errors in the JVMs started inside the block
    (`pomo` without ``--verbose``): the driver reads its logging setup from
    ``SPARK_SUBMIT_OPTS``, unless the user set a logging configuration there already. The
    variable is as it was after the block (a program calling `pomo`'s `main` keeps its
    own)."""
    given = environ.get("SPARK_SUBMIT_OPTS")
    if given is not None and "log4j" in given:
        yield
        return
    environ["SPARK_SUBMIT_OPTS"] = f"{given or ''} -Dlog4j2.configurationFile={QUIET_LOGS}".strip()
    try:
        yield
    finally:
        if given is None:
            environ.pop("SPARK_SUBMIT_OPTS", None)
        else:
            environ["SPARK_SUBMIT_OPTS"] = given
