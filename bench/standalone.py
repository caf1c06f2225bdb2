"""A Spark standalone cluster on this machine: a master and one-core workers started from
the installed PySpark on 127.0.0.1 (no download), as docs/operations.md shows. The tests'
cluster and the benchmarks' are this one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _workers_alive(ui: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as page:
            state = json.load(page)
    except OSError:
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


@contextmanager
def standalone(work: Path, workers: int = 2, wait: float = 90) -> Iterator[str | None]:
    """``spark://127.0.0.1:PORT`` of a master with ``workers`` one-core workers (their logs
    and folders under ``work``), stopped after; None when they did not start within
    ``wait`` seconds."""
    port, ui = free_port(), free_port()
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOG_DIR": str(work)}
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    url = f"spark://127.0.0.1:{port}"
    master = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
    master += ["--port", str(port), "--webui-port", str(ui)]
    quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.STDOUT}
    started = [subprocess.Popen(master, **quiet)]  # type: ignore[call-overload]
    for i in range(workers):
        worker = [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1"]
        worker += ["--cores", "1", "--memory", "1g", "--webui-port", str(free_port())]
        worker += ["--work-dir", str(work / f"worker{i}")]
        started.append(subprocess.Popen(worker, **quiet))  # type: ignore[call-overload]
    try:
        deadline = time.monotonic() + wait
        while _workers_alive(ui) < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in started):
                yield None
                return
            time.sleep(0.5)
        yield url
    finally:
        for p in started:
            p.terminate()
        for p in started:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def on_cluster(url: str) -> dict[str, str]:
    """The environment of a process whose Spark runs on the cluster ``url``: its executors'
    Python workers use this interpreter, which has the project's packages."""
    return {**os.environ, "POMO_SPARK_MASTER": url, "PYSPARK_PYTHON": sys.executable}
