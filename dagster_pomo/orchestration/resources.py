"""Dagster resources: where Spark runs and where the warehouse and landing files live."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dagster import ConfigurableResource
from pydantic import Field

from dagster_pomo.engine.lines import DEFAULT_TIMES, TimeWindow
from dagster_pomo.engine.pipeline import Storage
from dagster_pomo.engine.policy import DEFAULT, DRIVER_ENGINES, Policy
from dagster_pomo.engine.settings import SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkResource(ConfigurableResource):
    """The Spark session: local by default, a master URL or a Spark Connect URL otherwise."""

    master: str | None = Field(
        default=None, description="Spark master URL (default: $POMO_SPARK_MASTER, or local[*])"
    )
    remote: str | None = Field(
        default=None,
        description="Spark Connect URL, which wins over master (default: $POMO_SPARK_REMOTE "
        "when no master is given)",
    )
    conf: dict[str, str] = Field(default_factory=dict, description="extra Spark configuration")
    engine: str = Field(
        default=DRIVER_ENGINES[0],
        description="where the strata are worked out: `auto`, the run's process for epochs "
        "of up to in_process_inputs input events and Spark's plans for larger ones; "
        "`local`, the run's process alone, Spark never started (no Java needed; the "
        "warehouse a local folder); `spark`, Spark's plans alone",
    )
    one_pass: bool = Field(
        default=DEFAULT.one_pass,
        description="evaluate a partition range in one pass where that stores what epoch by "
        "epoch stores (false: epoch by epoch, as a schedule does)",
    )
    in_process_inputs: int = Field(
        default=DEFAULT.in_process_inputs,
        description="an epoch of at most this many input events is worked out in the run's "
        "process instead of Spark's plans where it can be (0: never)",
    )
    in_process_epochs: int = Field(
        default=DEFAULT.in_process_epochs,
        description="a partition range of at most this many epochs, each holding at most "
        "in_process_inputs input events, is worked out epoch by epoch in the run's process "
        "where it can be, rather than in one Spark pass (0: never)",
    )
    interpret_inputs: int = Field(
        default=DEFAULT.interpret_inputs,
        description="an epoch of at most this many input events runs Spark's plans without "
        "generated code (-1: never)",
    )
    task_rows: int = Field(
        default=DEFAULT.task_rows,
        description="rounds of a linear recursion run inside Spark tasks while a task knows "
        "at most this many versions (0: Spark's rounds only)",
    )
    spark_landing_bytes: int = Field(
        default=DEFAULT.spark_landing_bytes,
        description="the inputs step has Spark's tasks read the landing files it reads when "
        "they hold more bytes than this, with the same checks and quarantine, the run's "
        "process holding none of their events (below 0: never)",
    )

    reach: bool = Field(
        default=DEFAULT.reach,
        description="a run evaluates, of its partitions, only those that something stored "
        "since their versions reaches (a late event's epoch and the epochs its consequences "
        "live into), keeping the others as stored; false: every partition of the run (after "
        "changing a registered lattice function, which the records cannot see)",
    )

    budgets: dict[str, int] = Field(
        default_factory=dict,
        description="how much one epoch may ask for, by name (rounds, versions, text, "
        "combinations; see docs/operations.md): a partition past one fails with the rule "
        "and the budget named, and nothing of its epoch stored",
    )

    def policy(self) -> Policy:
        """How the engine may run the corpus (none of these changes what it stores), and its
        budgets (a `UsageError` names one that does not exist)."""
        return Policy(
            budgets=DEFAULT.budgets.with_settings(self.budgets),
            one_pass=self.one_pass,
            reach=self.reach,
            in_process_inputs=self.in_process_inputs,
            in_process_epochs=self.in_process_epochs,
            interpret_inputs=self.interpret_inputs,
            task_rows=self.task_rows,
            spark_landing_bytes=self.spark_landing_bytes,
        ).for_engine(self.engine)

    def get_session(self, epochs: int | None = None) -> SparkSession:
        """The process's session, for a user's own Spark work in an asset; ``epochs``, how
        many the run evaluates, picks the JVM's compiler when this call starts Spark (see
        :meth:`settings`)."""
        from dagster_pomo.engine.driver import session

        return session(self.settings(epochs))

    def settings(self, epochs: int | None = None) -> SparkSettings:
        """Where Spark runs, for a run of ``epochs`` (see `SparkSettings.for_epochs`)."""
        env = SparkSettings.from_env()  # what `pomo run` follows too
        remote = self.remote or (None if self.master else env.remote)
        master = self.master or env.master
        return SparkSettings(master=master, remote=remote, conf=dict(self.conf)).for_epochs(epochs)


class PomoStorage(ConfigurableResource):
    """The warehouse root (any Spark-readable URI) and the landing location of input events."""

    warehouse: str = Field(description="root of the Parquet warehouse")
    landing: str = Field(description="folder of JSON Lines landing files")
    ledger: str | None = Field(
        default=None,
        description="the action ledger: a folder (a SQLite file per corpus) or a "
        "`postgresql://` URL (one database for runs on several machines); default: the "
        "POMO_LEDGER environment variable, else the warehouse root when it is a local path",
    )
    times: str = Field(
        default=str(DEFAULT_TIMES),
        description="the times input events may have, FROM..UNTIL (ISO-8601 or milliseconds) "
        "or `any`; an event outside is quarantined (a time in seconds, a sentinel)",
    )

    def storage(self) -> Storage:
        """The same places, as the engine's pipeline steps take them."""
        return Storage(self.warehouse, self.landing, self.ledger, self.times)

    def window(self) -> TimeWindow:
        """The accepted times, or a ``UsageError`` saying how to write them."""
        return self.storage().window()

    def local_folder(self, corpus: str) -> Path | None:
        """``corpus``'s folder in the warehouse when the warehouse is a local path."""
        return self.storage().local_folder(corpus)

    def ledger_location(self, corpus: str) -> str:
        """Where ``corpus``'s action ledger lives: a SQLite file or a PostgreSQL URL."""
        return self.storage().ledger_location(corpus)
