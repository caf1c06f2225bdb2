"""Spark needs Java 17+: we find it, or fail with a message that says what to do."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dagster_pomo.engine.java import JavaNotFoundError, parse_java_version, require_java


def test_this_machine_has_a_java_spark_can_use() -> None:
    java = require_java()
    assert java.major >= 17 and java.path.is_file()


def test_missing_java_says_how_to_install_one(tmp_path: Path) -> None:
    with pytest.raises(JavaNotFoundError, match=r"Java 17\+ is needed.*Install a JDK"):
        require_java({"PATH": str(tmp_path)})


def test_old_java_is_refused_by_version(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'openjdk version \"1.8.0_392\"' >&2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(JavaNotFoundError, match="is Java 8"):
        require_java({"JAVA_HOME": str(tmp_path), "PATH": os.defpath})


@pytest.mark.parametrize(
    ("text", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_211"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ("garbage", None),
    ],
)
def test_version_strings(text: str, major: int | None) -> None:
    assert parse_java_version(text) == major
