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

from dagster_pomo.examples import CORPORA

ROOT = Path(__file__).resolve().parent.parent
RULES = CORPORA
GOLDEN = Path(__file__).resolve().parent / "golden"
# py4j logs each connection it closes, the last ones at exit after pytest closed its
# streams (a "Logging error" traceback under the summary): only its warnings are kept.
logging.getLogger("py4j").setLevel(logging.WARNING)


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


# The modules whose tests take longest (a minute or more each here), started first: a
# worker takes a whole module at a time, in collection order, so the two then finish
# together rather than one running the last long module alone.
LONGEST_FIRST = (
    "test_engine_properties",
    "test_cluster",
    "test_airflow_ui",
    "test_ui",
    "test_cli_run",
    "test_airflow",
    "test_dagster_assets",
    "test_pomologic",
    "test_class_archive",
    "test_session",
    "test_actions",
    "test_long_recursion",
    "test_language_properties",
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
