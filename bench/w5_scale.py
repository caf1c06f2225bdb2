"""W5: the water tanks at scale, each run a fresh process, against a hand-written PySpark job.

A landing of ``readings`` water-level events (a fleet of ``tanks`` over ``hours`` hourly
epochs, one JSON Lines file a day) is evaluated and written out by:

- ``pomo run --out`` with Spark's tasks reading the landing (``--landing-reader spark``),
  the whole history in one pass;
- the same, epoch by epoch (``--epoch-by-epoch``: what a schedule does, one hour at a time);
- the same with this process reading the landing (``--landing-reader process``), to show
  what the driver holds when it does;
- a hand-written PySpark job in a fresh process: ``spark.read.json`` with a schema, rows
  with a missing field dropped (no quarantine), then W2's job (`w2_epochs.hand_written`:
  minute buckets, a ten-minute range window, a join with the capacities, an anti-join
  with the maintenance windows), its four relations written as Parquet.

Each is timed from its start to its exit; the peak resident memory of the Python driver and
of the JVM (sampled every 0.2 s) are reported apart. The events of three relations each
writes are counted and must agree.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq

from bench.w2_epochs import CORPUS
from dagster_pomo.examples import DEFAULT_START, HOUR, water_tank_events

HAND_WRITTEN = """
import sys
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from bench.w2_epochs import hand_written

landing, out = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.master("local[*]").config("spark.driver.memory", "4g").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
schema = "relation string, t long, args struct<tank: string, level: double, reason: string>"
events = spark.read.schema(schema).json(landing).where(F.col("t").isNotNull())
readings = events.where(
    (F.col("relation") == "water_level") & F.col("args.tank").isNotNull()
    & F.col("args.level").isNotNull()
).select(F.col("args.tank").alias("tank"), F.col("args.level").alias("level"), "t")
maintenance = events.where(
    (F.col("relation") == "maintenance") & F.col("args.tank").isNotNull()
).select(F.col("args.tank").alias("tank"), "t")
# As `pomo run`: the events known before the end of the hour holding the last one.
hour = 3_600_000
until = (events.agg(F.max("t")).first()[0] // hour + 1) * hour
hand_written(spark, {"water_level": readings, "maintenance": maintenance}, out, until)
spark.stop()
"""


def _watched(command: list[str]) -> tuple[float, float, float]:
    """Run ``command``; its wall seconds and the peak resident MB of its Python process and
    of its JVM (a child process), sampled every 0.2 s."""
    began = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peaks = {"python": 0.0, "jvm": 0.0}

    def sample() -> None:
        root = psutil.Process(process.pid)
        while process.poll() is None:
            try:
                python = root.memory_info().rss
                children = root.children(recursive=True)
            except psutil.Error:
                break  # the run has ended
            jvm = 0
            for child in children:  # a Python worker may end between listing and reading
                try:
                    jvm += child.memory_info().rss if "java" in child.name() else 0
                except psutil.Error:
                    continue
            peaks["python"] = max(peaks["python"], python / 2**20)
            peaks["jvm"] = max(peaks["jvm"], jvm / 2**20)
            time.sleep(0.2)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    _, err = process.communicate()
    seconds = time.perf_counter() - began
    watcher.join()
    if process.returncode != 0:
        raise SystemExit(f"{command[:4]} failed:\n{err.decode()[-3000:]}")
    return seconds, peaks["python"], peaks["jvm"]


def _landing(folder: Path, readings: int, tanks: int, hours: int) -> int:
    """One file a day of the readings; how many bytes in all."""
    folder.mkdir(parents=True)
    days = max(1, hours // 24)
    for day in range(days):
        water_tank_events(
            folder / f"day-{day:03d}.jsonl",
            readings // days,
            tanks=tanks,
            hours=min(24, hours),
            start=DEFAULT_START + day * 24 * HOUR,
            seed=day + 1,
        )
    return sum(p.stat().st_size for p in folder.iterdir())


def _events(out: Path, relation: str) -> int:
    """The events of ``relation`` a run wrote: pomo's JSON Lines, or the hand-written job's
    Parquet parts."""
    if (out / f"{relation}.jsonl").exists():
        with open(out / f"{relation}.jsonl", "rb") as handle:
            return sum(1 for _ in handle)
    return sum(pq.read_metadata(f).num_rows for f in (out / relation).glob("*.parquet"))


COUNTED = ("level_10m", "near_capacity", "overflow_alert")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.w5_scale", description=__doc__)
    parser.add_argument("--readings", type=int, nargs="+", default=[1_000_000, 3_000_000])
    parser.add_argument("--tanks", type=int, default=300)
    parser.add_argument("--hours", type=int, default=48)
    parser.add_argument("--cases", nargs="+", default=["spark", "epochs", "process", "hand"])
    args = parser.parse_args(argv)
    pomo = str(Path(sys.executable).with_name("pomo"))
    corpus = str(CORPUS)
    print(
        f"| readings | landing MB | system | s | / hand-written | driver MB | JVM MB | "
        f"{'/'.join(COUNTED)} |"
    )
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for readings in args.readings:
        with tempfile.TemporaryDirectory(prefix="pomo-w5-") as tmp:
            work = Path(tmp)
            size = _landing(work / "landing", readings, args.tanks, args.hours) / 2**20
            landing = str(work / "landing")
            run = [pomo, "run", corpus, "--events", landing]
            commands = {
                "spark": ("pomo run, Spark reads", [*run, "--landing-reader", "spark"]),
                "epochs": (
                    "pomo run, Spark reads, epoch by epoch",
                    [*run, "--landing-reader", "spark", "--epoch-by-epoch"],
                ),
                "process": ("pomo run, process reads", [*run, "--landing-reader", "process"]),
                "hand": ("PySpark, hand-written", [sys.executable, "-c", HAND_WRITTEN, landing]),
            }
            got: dict[str, tuple[float, float, float, str]] = {}
            for case in args.cases:
                name, command = commands[case]
                out = work / f"out-{case}"
                seconds, python, jvm = _watched([*command, *(
                    [str(out)] if case == "hand" else ["--out", str(out)]
                )])  # fmt: skip
                counts = "/".join(f"{_events(out, r):,}" for r in COUNTED)
                got[case] = (seconds, python, jvm, counts)
            hand = got.get("hand", (0.0,))[0]
            for case, (seconds, python, jvm, counts) in got.items():
                ratio = f"{seconds / hand:.2f}x" if hand else "-"
                print(
                    f"| {readings:,} | {size:,.0f} | {commands[case][0]} | {seconds:.1f} | "
                    f"{ratio} | {python:,.0f} | {jvm:,.0f} | {counts} |",
                    flush=True,
                )
            if len({a for *_, a in got.values()}) > 1:
                print(f"the outputs differ in size: {got}")
                return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
