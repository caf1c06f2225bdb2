"""Find the Java runtime PySpark needs, and say clearly what to do when it is missing.

PySpark starts a JVM through ``$JAVA_HOME/bin/java`` or the ``java`` on
``PATH``; without one it fails deep inside py4j with an unhelpful message. We
look first, so users see what is wrong and how to fix it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dagster_pomo.errors import PomoError

MIN_JAVA = 17

JAVA_MISSING = (
    "Java {min}+ is needed to run Spark, but no `java` was found (looked in $JAVA_HOME/bin "
    "and on PATH). Install a JDK, e.g. `apt-get install openjdk-17-jre-headless`, or set "
    "JAVA_HOME to one."
)
JAVA_TOO_OLD = (
    "Spark needs Java {min} or newer, but {path} is Java {found}. Install a newer JDK and "
    "point JAVA_HOME at it."
)


class JavaNotFoundError(PomoError):
    """No usable Java runtime for Spark."""


@dataclass(frozen=True)
class Java:
    path: Path
    major: int
    banner: str = ""  # what `java -version` printed: tells builds of one version apart


def _candidate(env: dict[str, str]) -> Path | None:
    home = env.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return Path(home) / "bin" / "java"
    found = shutil.which("java", path=env.get("PATH", ""))
    return Path(found) if found else None


def parse_java_version(text: str) -> int | None:
    """The major version in ``java -version`` output: ``"17.0.15"`` -> 17, ``"1.8.0"`` -> 8."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def require_java(env: dict[str, str] | None = None) -> Java:
    """The Java that Spark will use, or :class:`JavaNotFoundError` saying how to get one."""
    env = dict(os.environ if env is None else env)
    path = _candidate(env)
    if path is None:
        raise JavaNotFoundError(JAVA_MISSING.format(min=MIN_JAVA))
    try:
        result = subprocess.run(
            [str(path), "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as exc:
        raise JavaNotFoundError(f"{path} could not be run: {exc}") from exc
    major = parse_java_version(result.stderr + result.stdout)
    if major is None:
        raise JavaNotFoundError(f"{path} -version did not print a version it could read")
    if major < MIN_JAVA:
        raise JavaNotFoundError(JAVA_TOO_OLD.format(min=MIN_JAVA, path=path, found=major))
    return Java(path, major, (result.stderr + result.stdout).strip())
