"""Whether Spark's executors can run this project's own code.

Most of what runs inside Spark's tasks travels with each task by value (cloudpickle), so
executors need only numpy, pandas and pyarrow. The rounds of a recursion that is not
linear run the in-process executor itself in one task (`local.task_rounds`), which goes
by reference: the executors must import the same version of dagster-pomo. In local mode
they are this machine's Python; on a cluster or under Spark Connect one small job asks
them, once per Spark application.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from dagster_pomo import __version__
from dagster_pomo.engine.spark.lookups import is_connect
from dagster_pomo.engine.spark.session import runs_here

_ANSWERS: dict[str, bool] = {}  # per Spark application (or Connect session)


def _application(spark: Any) -> str:
    if is_connect(spark):
        return f"connect:{spark.session_id}"
    return f"app:{spark.sparkContext.applicationId}"


def have_project(spark: Any) -> bool:
    """Whether ``spark``'s executors import this dagster-pomo: true in local mode (this
    machine's Python), asked once per application elsewhere (`ask`)."""
    if runs_here(spark):
        return True
    app = _application(spark)
    if app not in _ANSWERS:
        _ANSWERS[app] = ask(spark)
    return _ANSWERS[app]


def ask(spark: Any) -> bool:
    """Whether one of ``spark``'s tasks imports the rounds' module of this very version of
    dagster-pomo (one job of one task; false when the task cannot run at all)."""

    def version_there(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The version an executor imports with the rounds' module, "" if none (a nested
        function: it travels by value, so it runs where the project is not installed)."""
        import pyarrow

        for _ in batches:
            pass
        try:
            import dagster_pomo
            import dagster_pomo.engine.local.task_rounds  # noqa: F401  (what the rounds need)

            version = dagster_pomo.__version__
        except Exception:  # noqa: BLE001  (failing to import it means: not there)
            version = ""
        yield pyarrow.RecordBatch.from_pydict({"version": [version]})

    try:
        one = spark.range(0, 1, 1, numPartitions=1)  # one task (an empty one answers too)
        asked = one.mapInArrow(version_there, "version string").collect()
    except Exception:  # noqa: BLE001  (executors that cannot run it cannot run the rounds)
        return False
    return [row["version"] for row in asked] == [__version__]
