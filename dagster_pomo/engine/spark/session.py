"""The one Spark session of a process, configured from one place.

Local mode by default (``local[*]``); a master URL (standalone, YARN, k8s) or a
Spark Connect URL (``sc://host:15002``) and any Spark conf come from
:class:`SparkSettings`. The defaults suit small data: few shuffle partitions,
no UI, UTC, quiet logs.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from dagster_pomo.engine.java import require_java
from dagster_pomo.engine.settings import OUR_JAVA_OPTIONS, SparkSettings
from dagster_pomo.engine.spark.class_archive import with_archive
from dagster_pomo.engine.spark.lookups import is_connect, remember_lookups
from dagster_pomo.errors import SettingsError, UsageError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # Undefined values (division by zero, bad casts) become null and drop the match,
    # as in the reference evaluator, instead of failing the job.
    "spark.sql.ansi.enabled": "false",
    "spark.sql.adaptive.enabled": "false",
    # A recursive relation spread on one argument joins its rounds' new versions on all of
    # their key without a shuffle (see engine.partitioning).
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
    # Dropping an alias such as `a AS a` renames a column under a stored piece; the piece
    # would then record its partitioning against a column it no longer has, and every
    # round would shuffle it again.
    "spark.sql.optimizer.excludedRules": (
        "org.apache.spark.sql.catalyst.optimizer.RemoveRedundantAliases"
    ),
    "spark.driver.memory": "4g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Each epoch writes a few small partitions: keep the commit protocol cheap.
    "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version": "2",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.sql.parquet.compression.codec": "snappy",
    # Reading the history of a long-lived relation names one path per epoch; list them
    # on the driver instead of starting a listing job.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
    # PySpark records the Python call site of every column function for error messages,
    # several JVM calls each time; plans here are built by the engine, not by the user's
    # code, so the call sites would only name the engine, and an epoch builds thousands.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Each task of a Python function (aggregates, content IDs) connects to a Python worker:
    # over a Unix domain socket rather than TCP with its handshake, a small job's ~150 ms
    # are ~95 ms.
    "spark.python.unix.domain.socket.enabled": "true",
}


def spark_session(settings: SparkSettings | None = None) -> SparkSession:
    """The process's Spark session, created on first use."""
    from pyspark.sql import SparkSession

    settings = settings or SparkSettings.from_env()
    active = SparkSession.getActiveSession()
    if active is not None:
        remember_lookups(active)
        return active
    require_reachable(settings)
    builder = SparkSession.builder.appName(settings.app_name)
    conf = session_conf(settings)
    if settings.remote:
        builder = builder.remote(settings.remote)
    else:
        java = require_java()
        builder = builder.master(settings.master)
        if settings.master.startswith("local"):  # this process starts the driver's JVM
            conf = with_archive(conf, java, OUR_JAVA_OPTIONS)
    if (settings.remote or settings.master).startswith("local"):
        # Python workers run some aggregates; locally they need this interpreter's
        # packages, not whatever ``python3`` is first on the PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # Spark's own errors name no setting; say which one it was
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SettingsError(
            f"Spark did not start on {_where(settings)}: {first[:300]} (its settings: "
            "--master or --remote and --conf, $POMO_SPARK_MASTER or $POMO_SPARK_REMOTE, the "
            "resource's `master`, `remote` and `conf`)"
        ) from exc
    session.sparkContext.setLogLevel("ERROR") if not settings.remote else None
    remember_lookups(session)
    return session


_HINT_MASTER = " (set by --master, $POMO_SPARK_MASTER or the resource's `master`)"
_HINT_REMOTE = " (set by --remote, $POMO_SPARK_REMOTE or the resource's `remote`)"
REACH_SECONDS = 5.0  # how long a master or Connect server may take to accept a connection


def _where(settings: SparkSettings) -> str:
    return f"Spark Connect server {settings.remote}" if settings.remote else settings.master


def _addresses(settings: SparkSettings) -> list[tuple[str, int]]:
    """The host and port of each standalone master (``spark://a:7077,b:7077``) or of the
    Spark Connect server (``sc://host:15002/;token=...``); none for other masters (local,
    YARN, Kubernetes), which Spark finds its own way."""
    if settings.remote:
        if settings.remote.startswith("sc://"):
            parts = urlsplit(settings.remote.split("/;")[0])
            return [(parts.hostname or "localhost", parts.port or 15002)]
        return []
    if not settings.master.startswith("spark://"):
        return []
    out = []
    for hostport in settings.master[len("spark://") :].split(","):
        host, _, port = hostport.rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out


def require_reachable(settings: SparkSettings, timeout: float = REACH_SECONDS) -> None:
    """A ``SettingsError`` naming the master or Connect server when none of its addresses
    accepts a connection within ``timeout`` seconds: Spark itself retries for a minute and
    more before it gives up, and then names no setting."""
    addresses = _addresses(settings)
    reasons = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc.strerror or exc}")
    if addresses:
        hint = _HINT_REMOTE if settings.remote else _HINT_MASTER
        raise SettingsError(
            f"{_where(settings)} cannot be reached ({'; '.join(reasons)}): start it, or "
            f"name the one to use{hint}"
        )


class LazySession:
    """The process's Spark session, started when something first needs it.

    A small epoch is worked out in this process, its inputs written and its reports read
    with pyarrow (`engine.local`, `Warehouse.put`, `read_table`): a run of such epochs
    needs no JVM, and a fresh process (an Airflow task, a Dagster run, `pomo run` on a
    little data) would otherwise spend seconds starting one. Anything else asked of this
    object starts the session and is asked of it. Only for local mode: a cluster or a
    Spark Connect server runs every plan (see `EpochStore.local`)."""

    def __init__(self, settings: SparkSettings, refusal: str | None = None) -> None:
        self.settings = settings
        # Why Spark must not start (`pomo run --engine local`): asking for it is an error
        # saying so, never a JVM started behind the user's back.
        self.refusal = refusal
        self._session: SparkSession | None = None
        # The job group of the epoch under way, given to the session when it starts, and
        # the jobs the group had then (the process's Spark may have run it before).
        self.job_group: tuple[str, str] | None = None
        self.earlier_jobs: set[int] = set()

    @property
    def started(self) -> bool:
        return self._session is not None

    def get(self) -> SparkSession:
        """The session (started now if it is not yet, in the epoch's job group)."""
        if self._session is None:
            if self.refusal is not None:
                raise SparkRefused(self.refusal)
            self._session = spark_session(self.settings)
            if self.job_group is not None:
                context = self._session.sparkContext
                context.setJobGroup(*self.job_group)
                group = self.job_group[0]
                self.earlier_jobs = set(context.statusTracker().getJobIdsForGroup(group))
        return self._session

    def conf_value(self, key: str) -> str | None:
        """A setting the session has or will have, without starting it."""
        if self._session is not None:
            return self._session.conf.get(key, None)
        return session_conf(self.settings).get(key)

    def __getattr__(self, name: str) -> object:
        return getattr(self.get(), name)


def lazy_session(settings: SparkSettings | None = None) -> SparkSession | LazySession:
    """The process's session when one runs or Spark is not local; else a `LazySession`."""
    from pyspark.sql import SparkSession

    settings = settings or SparkSettings.from_env()
    active = SparkSession.getActiveSession()
    if active is not None or settings.remote or not settings.master.startswith("local"):
        return spark_session(settings)
    return LazySession(settings)


class SparkRefused(UsageError):
    """Something asked for Spark in a run told to do without it (``--engine local``)."""


def refuses_spark(spark: object) -> bool:
    """Whether ``spark`` is a `LazySession` that must never start (see `LazySession.refusal`)."""
    return isinstance(spark, LazySession) and spark.refusal is not None


def runs_here(spark: SparkSession | LazySession) -> bool:
    """Whether ``spark``'s tasks run on this machine (local mode, not Connect): they see
    the files this process sees."""
    if isinstance(spark, LazySession):  # only ever local
        return True
    return not is_connect(spark) and spark.sparkContext.master.startswith("local")


def started(spark: object) -> object | None:
    """``spark`` as a running session, or None for a `LazySession` not started yet."""
    if isinstance(spark, LazySession):
        return spark.get() if spark.started else None
    return spark


def session_conf(settings: SparkSettings) -> dict[str, str]:
    """The conf a new session is given: the defaults, then the user's.

    A running Spark Connect server (``sc://``) set up its JVM, UI and console when it
    started; a client can only set session (SQL and Hadoop) settings, and Spark warns
    about each other one. So the defaults send such a server only those; a server that
    PySpark starts here (``local``) takes them all, and what the user asks for is sent
    as asked.
    """
    defaults = DEFAULT_CONF
    if settings.remote and settings.remote.startswith("sc://"):
        defaults = {k: v for k, v in DEFAULT_CONF.items() if k.startswith(_SESSION_PREFIXES)}
    return {**defaults, **settings.conf}


_SESSION_PREFIXES = ("spark.sql.", "spark.hadoop.")
