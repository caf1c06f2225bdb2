"""`pomo jvm-cache`: a class-data archive that later local Spark sessions start on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dagster_pomo.engine.java import Java
from dagster_pomo.engine.settings import JAVA_OPTIONS, OUR_JAVA_OPTIONS, QUICK_JIT
from dagster_pomo.engine.spark.class_archive import (
    CACHE_ENV,
    archive_for,
    with_archive,
)
from tests.conftest import ROOT

POMO = Path(sys.executable).with_name("pomo")
JAVA = Java(Path("/usr/bin/java"), 17, 'openjdk version "17.0.15" 2025-04-15')


def test_an_archive_is_used_only_by_the_java_and_settings_it_was_made_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JVM of another build, heap or class path cannot use the archive (and one given a
    broken archive crashes): each gets a name of its own, and nothing is added to a session
    until the archive is there."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    archive = archive_for(JAVA, {"spark.driver.memory": "4g"})
    other_build = Java(JAVA.path, 17, 'openjdk version "17.0.16" 2025-07-15')
    assert archive.parent == tmp_path
    assert archive_for(other_build, {"spark.driver.memory": "4g"}) != archive
    assert archive_for(JAVA, {"spark.driver.memory": "8g"}) != archive
    more = {"spark.driver.memory": "4g", "spark.driver.extraClassPath": "/opt/jdbc.jar"}
    assert archive_for(JAVA, more) != archive
    assert archive_for(JAVA, {"spark.driver.memory": "4g"}) == archive
    with monkeypatch.context() as elsewhere:  # the same PySpark in another environment
        import pyspark

        elsewhere.setattr(pyspark, "__file__", "/opt/other-venv/pyspark/__init__.py")
        assert archive_for(JAVA, {"spark.driver.memory": "4g"}) != archive

    conf = {"spark.driver.memory": "4g"}
    assert with_archive(conf, JAVA, OUR_JAVA_OPTIONS) == conf, "no archive yet"
    archive.write_bytes(b"made by pomo jvm-cache")
    # A JVM that cannot map it after all says so on stdout, where pomo prints: not at all.
    option = f"-XX:SharedArchiveFile={archive} -Xlog:cds*=off"
    assert with_archive(conf, JAVA, OUR_JAVA_OPTIONS)[JAVA_OPTIONS] == option
    quick = {**conf, JAVA_OPTIONS: QUICK_JIT}
    assert with_archive(quick, JAVA, OUR_JAVA_OPTIONS)[JAVA_OPTIONS] == f"{QUICK_JIT} {option}"
    mine = {**conf, JAVA_OPTIONS: "-Xss4m"}
    assert with_archive(mine, JAVA, OUR_JAVA_OPTIONS) == mine, "the user's options are theirs"


def test_pomo_jvm_cache_makes_the_archive_that_a_new_session_starts_on(tmp_path: Path) -> None:
    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache")}
    made = subprocess.run(
        [str(POMO), "jvm-cache"], capture_output=True, text=True, cwd=ROOT, env=env, check=False
    )
    assert made.returncode == 0, made.stderr[-2000:]
    (archive,) = (tmp_path / "cache").iterdir()  # no partial file is left beside it
    assert archive.name.startswith("spark-classes-") and archive.suffix == ".jsa"
    assert archive.stat().st_size > 0
    assert str(archive) in made.stdout

    # A new process's local session starts its JVM on the archive, and the JVM works.
    script = (
        "from dagster_pomo.engine.spark.session import spark_session\n"
        "spark = spark_session()\n"
        "print(spark.sparkContext.getConf().get('spark.driver.extraJavaOptions'))\n"
        "print(spark.range(10).selectExpr('sum(id) AS s').first()['s'])\n"
    )
    used = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert used.returncode == 0, used.stderr[-2000:]
    options, total = used.stdout.strip().splitlines()[-2:]
    assert f"-XX:SharedArchiveFile={archive}" in options.split()
    assert total == "45"
