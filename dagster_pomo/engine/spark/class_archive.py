"""A class-data archive for the local Spark driver: a new process starts Spark sooner.

Every scheduled run is a new process whose JVM loads, parses and verifies Spark's classes
again before its first epoch. Java's class-data sharing keeps them, already parsed, in an
archive file that a JVM maps when it starts. ``pomo jvm-cache`` makes the archive once: a
local Spark session evaluates a few water-tank epochs, and its JVM writes the classes it
loaded when it exits. Every later local session started with the same Java, PySpark,
driver memory and class path uses it, unless the user sets the driver's Java options.

The archive's name holds a digest of what it depends on, so another Java build or PySpark
never sees it. It is written under a name of its own and renamed only once its JVM has
exited cleanly: a JVM given a partial archive crashes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from dagster_pomo.engine.java import Java
from dagster_pomo.engine.settings import JAVA_OPTIONS

CACHE_ENV = "POMO_CACHE_DIR"


def cache_dir() -> Path:
    """``$POMO_CACHE_DIR``, else ``$XDG_CACHE_HOME/dagster-pomo``, else ``~/.cache/...``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dagster-pomo"


def archive_for(java: Java, conf: Mapping[str, str]) -> Path:
    """Where the archive for this Java, this PySpark installation (its jars' paths are the
    class path: another environment's copy of the same version cannot use it), this driver
    memory and class path lives (a JVM with another heap or class path cannot use it)."""
    import pyspark

    home = str(Path(pyspark.__file__).resolve().parent)
    parts = [str(java.path.resolve()), java.banner, pyspark.__version__, home]
    parts += [conf.get("spark.driver.memory", ""), conf.get("spark.driver.extraClassPath", "")]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return cache_dir() / f"spark-classes-{java.major}-{digest}.jsa"


def with_archive(conf: Mapping[str, str], java: Java, ours: frozenset[str]) -> dict[str, str]:
    """``conf`` with the driver started on the archive, when there is one and the driver's
    Java options are unset or only ``ours`` (options the project picked, not the user)."""
    out = dict(conf)
    given = out.get(JAVA_OPTIONS, "")
    archive = archive_for(java, out)
    if not archive.is_file() or (given and given not in ours):
        return out
    # An archive the JVM cannot map after all is only slower; its warning would otherwise go
    # to stdout, into what `pomo` prints there (`explain --json`, tables).
    out[JAVA_OPTIONS] = f"{given} -XX:SharedArchiveFile={archive} -Xlog:cds*=off".strip()
    return out


def staged(target: Path) -> Path:
    """A new name beside ``target`` for one JVM to write its archive to."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    os.close(handle)
    os.unlink(name)  # the JVM creates it at exit
    return Path(name)
