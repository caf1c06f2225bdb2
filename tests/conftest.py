"""Shared test fixtures.

Set ``POMO_UPDATE_GOLDENS=1`` to rewrite golden files from the current output
(then read the diff before committing it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dagster_pomo.engine.settings import QUICK_JIT
from dagster_pomo.examples import CORPORA

ROOT = Path(__file__).resolve().parent.parent
RULES = CORPORA
GOLDEN = Path(__file__).resolve().parent / "golden"
# py4j logs each connection it closes, the last ones at exit after pytest closed its
# streams (a "Logging error" traceback under the summary): only its warnings are kept.
logging.getLogger("py4j").setLevel(logging.WARNING)


def pytest_configure(config: pytest.Config) -> None:
    """Every JVM the tests start on this machine (each worker's Spark session, and the
    drivers of the `pomo`, Dagster and Airflow processes they start) compiles with the
    JIT's quick tier only, unless ``SPARK_SUBMIT_OPTS`` is set already. Set here, before
    the workers start, so that they and their processes inherit it. The suite is bound
    by CPU on every core, and a test's JVM runs small plans for minutes at most: the
    optimizing tier's compiling cost more than its faster code saved (the whole suite on
    two cores: 1,360 s and 2,551 busy core-seconds, against 1,491-1,572 s and
    2,853-2,994 without). The quick tier changes how fast Spark's code runs, not what it
    computes."""
    os.environ.setdefault("SPARK_SUBMIT_OPTS", QUICK_JIT)
    _class_archive(config)


def _class_archive(config: pytest.Config) -> None:
    """A whole run's tests (in pytest-xdist workers, from the process that starts them)
    keep Spark's class-data archive in a folder of their own (``POMO_CACHE_DIR``, unless
    it is set: never the user's ``~/.cache``), and make one there with `pomo jvm-cache`
    beside the first tests: every local Spark JVM started once it exists (the workers'
    sessions, the `pomo`, Dagster and Airflow processes the tests start) maps Spark's
    classes from it rather than loading them, about 4 s less for each fresh process that
    starts Spark. Those started before it run without, as a machine that never ran `pomo
    jvm-cache` does. A run in one process (``-n 0``, a few tests) only keeps the folder
    its own."""
    import shutil
    import subprocess
    import sys
    import tempfile

    from dagster_pomo.engine.spark.class_archive import CACHE_ENV

    if hasattr(config, "workerinput") or os.environ.get(CACHE_ENV):
        return  # a worker (it inherits the folder) or a folder set by whoever runs the tests
    folder = tempfile.mkdtemp(prefix="pomo-test-cache-")
    os.environ[CACHE_ENV] = folder
    making = None
    workers = getattr(config.option, "numprocesses", None)
    pomo = Path(sys.executable).with_name("pomo")  # the `pomo` installed beside this Python
    if isinstance(workers, int) and workers > 0 and pomo.is_file():
        making = subprocess.Popen(
            [str(pomo), "jvm-cache"],
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def clean() -> None:
        if making is not None and making.poll() is None:
            making.kill()
            making.wait()
        shutil.rmtree(folder, ignore_errors=True)

    config.add_cleanup(clean)


class Golden:
    """Compares text with a checked-in file, or rewrites it when asked to."""

    update = os.environ.get("POMO_UPDATE_GOLDENS") == "1"

    def check(self, path: Path, actual: str) -> None:
        if self.update or not path.exists():
            if not self.update:
                pytest.fail(f"missing golden file {path}; run with POMO_UPDATE_GOLDENS=1")
            path.write_text(actual)
            return
        assert actual == path.read_text(), f"output differs from {path.name}"


@pytest.fixture
def golden() -> Golden:
    return Golden()


@pytest.fixture(scope="session", autouse=True)
def _one_spark_session_per_run():
    """Every Spark test of a worker process shares one local session; it is stopped when
    the worker's tests end."""
    yield
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


@pytest.fixture(scope="session", autouse=True)
def _example_lattices():
    """The examples' lattices (`flags`, `longest`), registered as a program running corpora
    that use them would: generated corpora and the semantic cases merge with them."""
    from dagster_pomo.engine.lattices import register_lattices
    from dagster_pomo.examples import LATTICES

    register_lattices(LATTICES)


# The modules whose tests take longest, longest first (seconds each took in a whole run
# on two cores, each beside the other worker's tests): a worker takes a whole module at a
# time, in collection order (`--no-loadscope-reorder`: not by number of tests, which put
# the two Airflow UI tests last, run alone while the other worker sat idle), so the two
# then finish together rather than one running the last long module alone.
LONGEST_FIRST = (
    "test_cli_run",  # 323
    "test_engine_properties",  # 322
    "test_semantics",  # 268
    "test_cluster",  # 235
    "test_warehouse",  # 178
    "test_ui",  # 170
    "test_pomologic",  # 168
    "test_airflow_ui",  # 156
    "test_actions",  # 149
    "test_spark_landing",  # 116
    "test_changes",  # 94
    "test_dagster_assets",  # 74
    "test_class_archive",  # 69
    "test_recursion",  # 68
    "test_reach",  # 67
    "test_session",  # 67
    "test_descent",  # 52
    "test_long_recursion",  # 47
    "test_language_properties",  # 43
    "test_airflow",  # 40
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """A PostgreSQL server of this worker's (started on first use); its URL."""
    from tests.postgres import postgres_server

    with postgres_server() as url:
        yield url
