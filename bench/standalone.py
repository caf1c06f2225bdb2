"""A Spark standalone cluster on this machine: a master and one-core workers started from
the installed PySpark on 127.0.0.1 (no download), as docs/operations.md shows. The tests'
cluster and the benchmarks' are this one.
"""

from __future__ import annotations

import json
import os
import re
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
    except (OSError, ValueError):  # not up yet
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


# Where the master says it listens: a port asked for may have been taken by another process
# since it was free (the master then takes the next one), so the ports are read back.
_MASTER = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI = re.compile(r"MasterWebUI: .*started at https?://[^\s/]+:(\d+)")


def _listening(log: Path) -> tuple[str, int] | None:
    """The master's URL and web UI port, once its log says both."""
    text = log.read_text(errors="replace") if log.exists() else ""
    url, ui = _MASTER.search(text), _MASTER_UI.search(text)
    return (url.group(1), int(ui.group(1))) if url and ui else None


@contextmanager
def standalone(
    work: Path, workers: int = 2, wait: float = 90, java_options: str = ""
) -> Iterator[str | None]:
    """``spark://127.0.0.1:PORT`` of a master with ``workers`` one-core workers (their logs
    and folders under ``work``), stopped after; None when they did not start within
    ``wait`` seconds. ``java_options``: for every JVM of the cluster, the master, the
    workers and the executors they start (Spark reads them from its configuration folder's
    ``java-opts``)."""
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOG_DIR": str(work)}
    if java_options:
        conf = work / "conf"
        conf.mkdir(exist_ok=True)
        (conf / "java-opts").write_text(java_options + "\n")
        env["SPARK_CONF_DIR"] = str(conf)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    master = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
    master += ["--port", str(free_port()), "--webui-port", str(free_port())]
    log = work / "master.log"
    quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.STDOUT}
    with open(log, "wb") as out:
        started = [subprocess.Popen(master, env=env, stdout=out, stderr=subprocess.STDOUT)]
    try:
        deadline = time.monotonic() + wait

        def failed() -> bool:
            return time.monotonic() > deadline or any(p.poll() is not None for p in started)

        while (listening := _listening(log)) is None:
            if failed():
                yield None
                return
            time.sleep(0.5)
        url, ui = listening
        for i in range(workers):
            worker = [spark_class, "org.apache.spark.deploy.worker.Worker", url]
            worker += ["--host", "127.0.0.1", "--cores", "1", "--memory", "1g"]
            worker += ["--webui-port", str(free_port()), "--work-dir", str(work / f"worker{i}")]
            started.append(subprocess.Popen(worker, **quiet))  # type: ignore[call-overload]
        while _workers_alive(ui) < workers:
            if failed():
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
