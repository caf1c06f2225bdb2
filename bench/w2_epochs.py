"""W2: incremental epochs. The water-tank corpus (clock resampling, sliding averages, alerts
with negation, an action) over hourly epochs of synthetic readings, three ways:

- **dagster-pomo, incremental**: epoch after epoch, each reading only the state its
  lifetimes keep alive (what a schedule does, one partition at a time);
- **dagster-pomo, re-evaluating history**: at an epoch, all events so far as one epoch
  (docs/semantics.md, Epochs: the results are the same). Re-running this at every one of 100
  epochs would take hours, so it is measured at ``samples`` evenly spaced epochs and its
  total is the sum over all epochs of the linear interpolation between them (from 0 at epoch
  0);
- **PySpark, hand-written**: the same logic as one DataFrame job over the whole history,
  reading the same Parquet inputs and writing its four relations as Parquet.

Writing the inputs to the warehouse is set-up for all three. The hand-written job's
alerts are checked equal (tank and time) to dagster-pomo's. Its ten-minute range window
works each frame out again as rows leave it, so it grows with the square of the readings
a minute; ``batch_peer=False`` leaves it out of runs at many readings.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.harness import Measurement, measure
from dagster_pomo.examples import DEFAULT_START, HOUR, water_tank_events

MINUTE = 60_000
if TYPE_CHECKING:
    from dagster_pomo.engine.policy import Policy
    from dagster_pomo.lang import Program

START = DEFAULT_START
CORPUS = Path(__file__).with_name("water_tanks.pomo")  # W2's workload, its peer's logic


def run(
    repeat: int,
    readings: int,
    hours: int,
    samples: int,
    *,
    batch_peer: bool = True,
    policy: Policy | None = None,
    provenance: bool = False,
) -> list[Measurement]:
    """With ``provenance``, also the incremental run of the corpus with `@provenance` on the
    alerts (so every relation they rest on carries it too), its alerts checked equal."""
    from dagster_pomo.engine.driver import Driver
    from dagster_pomo.engine.inputs import RunInputs, prepare
    from dagster_pomo.engine.policy import Policy
    from dagster_pomo.engine.spark.session import spark_session
    from dagster_pomo.lang import load_program

    spark = spark_session()
    program = load_program(CORPUS)
    case = f"water tanks, {hours} x 1h, {readings:,} readings"
    out: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="pomo-bench-w2-") as tmp:
        landing = Path(tmp) / "landing"
        landing.mkdir()
        water_tank_events(landing / "readings.jsonl", readings, tanks=3, hours=hours, start=START)
        prepared = prepare(program, landing, HOUR, start=START, until=START + hours * HOUR)
        counter = iter(range(10**6))

        def fresh(sub: RunInputs = prepared, corpus: Program = program):  # noqa: ANN202
            """An evaluator over a fresh warehouse holding the inputs (set-up, not timed)."""
            where = f"{tmp}/wh{next(counter)}"
            return Driver.for_run(corpus, sub, where, policy=policy or Policy(), session=spark)

        per_epoch: list[dict] = []

        def incremental(corpus: Program = program, sub: RunInputs = prepared) -> dict:
            evaluator = fresh(sub, corpus)
            rows_in: dict[tuple[str, str], int] = _input_rows(corpus, evaluator, sub)
            per_epoch.clear()
            total = 0.0
            for index, epoch in enumerate(prepared.epoch_range.epochs, start=1):
                stats = evaluator.evaluate_epoch(epoch)
                key = str(epoch.start)
                for s in stats.strata:
                    for name, n in s.rows.items():
                        rows_in[(name, key)] = n
                total += stats.seconds
                per_epoch.append(
                    {
                        "epoch": index,
                        "seconds": round(stats.seconds, 3),
                        "spark_jobs": stats.spark_jobs,
                        "state_rows_read": sum(rows_in.get(p, 0) for p in stats.partitions_read),
                    }
                )
            stored = f"{evaluator.backend.wh.root}/{program.name}/overflow_alert"
            alerts = _alerts(spark, stored)
            extra = {}
            if corpus is not program:
                sources = spark.read.parquet(stored).selectExpr("avg(size(_prov))").first()[0]
                extra["sources_per_alert"] = round(sources or 0.0, 1)
            return {
                **extra,
                "seconds": total,
                "epochs": len(per_epoch),
                "jobs_per_epoch": round(sum(e["spark_jobs"] for e in per_epoch) / len(per_epoch)),
                "alerts": alerts.count(),
                "_alerts": alerts,  # popped below: the peer is checked against it
            }

        ours = measure(case, "dagster-pomo", repeat, incremental)
        alerts = ours.extra.pop("_alerts")
        ours.extra["per_epoch"] = list(per_epoch)
        ours.extra["last_epoch_over_10th"] = _ratio(per_epoch, 10)
        ours.extra["last_ten_over_6th_to_15th"] = _window_ratio(per_epoch, 6, 10)
        if provenance:
            asked = with_provenance(program)
            inputs = prepare(asked, landing, HOUR, start=START, until=START + hours * HOUR)
            carried = measure(case, "dagster-pomo, alerts @provenance", repeat,
                              lambda: incremental(asked, inputs))  # fmt: skip
            wrong = carried.extra.pop("_alerts").exceptAll(alerts).count()
            if wrong or carried.extra["alerts"] != ours.extra["alerts"]:
                raise AssertionError("the alerts with @provenance differ")
            out.append(carried)

        def batch() -> dict:
            evaluator = fresh()  # the same Parquet inputs
            began = time.perf_counter()
            stored = {
                name: evaluator.backend.wh.read_all(name, evaluator.backend.structs[name])
                for name in ("water_level", "maintenance")
            }
            until = prepared.epoch_range.epochs[-1].end
            derived = hand_written(spark, stored, f"{tmp}/batch", until)
            seconds = time.perf_counter() - began
            wrong = alerts.exceptAll(derived).count() + derived.exceptAll(alerts).count()
            if wrong:
                raise AssertionError(f"the hand-written job's alerts differ in {wrong} rows")
            return {"seconds": seconds, "alerts": derived.count()}

        peers = [measure(case, "PySpark hand-written batch", repeat, batch)] if batch_peer else []

        whole = {
            i: prepared_until(prepared, START + i * HOUR) for i in _sample_points(hours, samples)
        }
        seconds_at: dict[int, float] = {}

        def reevaluate() -> dict:
            for i, sub in whole.items():
                evaluator = fresh(sub)
                (epoch,) = sub.epoch_range.epochs
                seconds_at[i] = evaluator.evaluate_epoch(epoch).seconds
            return {
                "seconds": _interpolated_total(seconds_at, hours),
                "measured_at": ",".join(map(str, seconds_at)),
            }

        again = measure(case, "dagster-pomo re-evaluating", repeat, reevaluate)
        again.extra["full_history_seconds"] = round(seconds_at[max(seconds_at)], 3)
        out += [ours, again, *peers]
    return out


def with_provenance(program: Program) -> Program:
    """The corpus with `@provenance` on the alerts' rule."""
    from dagster_pomo.lang import compile_corpus

    plain = "overflow_alert(tank, avg) ~ notify_operator :="
    text = CORPUS.read_text()
    assert plain in text
    asked = text.replace(plain, "overflow_alert(tank, avg) @provenance ~ notify_operator :=")
    return compile_corpus(asked, CORPUS.name)


def prepared_until(prepared, until: int):  # noqa: ANN001, ANN201
    """The events before ``until`` as one epoch ``[START, until)``."""
    from dagster_pomo.engine.ingest import Ingested
    from dagster_pomo.engine.inputs import RunInputs, epoch_range

    events = {
        name: [r for r in rows if r.kt < until] for name, rows in prepared.ingested.events.items()
    }
    ingested = Ingested(events=events, types=prepared.ingested.types)
    return RunInputs(ingested, prepared.schemas, epoch_range([], until - START, START, until))


def _sample_points(hours: int, samples: int) -> list[int]:
    step = max(1, hours // max(1, samples))
    points = list(range(step, hours + 1, step))
    if points[-1] != hours:
        points.append(hours)
    return points


def _interpolated_total(seconds_at: dict[int, float], hours: int) -> float:
    """Sum over epochs 1..hours of the cost of re-evaluating history at each, interpolating
    linearly between the measured epochs (and from 0 at epoch 0)."""
    known = sorted({0: 0.0, **seconds_at}.items())
    total = 0.0
    for i in range(1, hours + 1):
        for (a, sa), (b, sb) in zip(known, known[1:], strict=False):
            if a < i <= b:
                total += sa + (sb - sa) * (i - a) / (b - a)
                break
    return total


def _ratio(per_epoch: list[dict], early: int) -> float | None:
    """The last epoch's time over the ``early``-th's: does the cost grow with history?"""
    if len(per_epoch) <= early:
        return None
    return round(per_epoch[-1]["seconds"] / per_epoch[early - 1]["seconds"], 2)


def _window_ratio(per_epoch: list[dict], first: int, width: int) -> float | None:
    """The median of the last ``width`` epochs over that of epochs ``first`` to
    ``first + width - 1``: the same question as :func:`_ratio`, which one slow epoch on a
    busy machine can answer wrongly either way."""
    if len(per_epoch) < first + 2 * width - 1:
        return None
    early = [e["seconds"] for e in per_epoch[first - 1 : first - 1 + width]]
    late = [e["seconds"] for e in per_epoch[-width:]]
    return round(statistics.median(late) / statistics.median(early), 2)


def _input_rows(program, evaluator, prepared) -> dict[tuple[str, str], int]:  # noqa: ANN001
    """Rows of each stored input partition."""
    out: dict[tuple[str, str], int] = {}
    for rel in program.catalog.inputs:
        for row in prepared.ingested.events.get(rel.name, []):
            key = evaluator.key_for(row.kt)
            if key:
                out[(rel.name, key)] = out.get((rel.name, key), 0) + 1
    return out


def _alerts(spark, folder: str):  # noqa: ANN001, ANN202
    return spark.read.parquet(folder).select("tank", "t").distinct()


def hand_written(spark, stored: dict, out: str, until: int | None = None):  # noqa: ANN001, ANN201
    """The water-tank logic as a batch DataFrame job over the stored readings and maintenance
    windows, as a data engineer would write it: minute buckets, a ten-minute range window
    asked at each reading and at each reading's expiry (before ``until``) while a reading
    is alive, a join with the capacities and an anti-join with the maintenance windows.
    Returns the alerts."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    readings = stored["water_level"].select("tank", "level", "t")
    maintenance = stored["maintenance"].select(
        F.col("tank").alias("m_tank"), F.col("t").alias("m_t")
    )
    capacity = spark.createDataFrame(
        [("north", 100.0), ("south", 80.0), ("east", 120.0)], "tank string, max_level double"
    )
    per_minute = (
        readings.withColumn("tick", (F.floor(F.col("t") / MINUTE) + 1) * MINUTE)
        .groupBy("tank", "tick")
        .agg(F.avg("level").alias("average"), F.count(F.lit(1)).alias("count"))
        .select("tank", "average", "count", (F.col("tick") - MINUTE // 2).alias("t"))
    )
    window = Window.partitionBy("tank").orderBy("t").rangeBetween(-(10 * MINUTE - 1), 0)
    # The window changes when a reading arrives and when one expires, ten minutes later.
    expiries = readings.select(
        "tank", F.lit(None).cast("double").alias("level"), (F.col("t") + 10 * MINUTE).alias("t")
    )
    if until is not None:
        expiries = expiries.where(F.col("t") < until)
    level_10m = (
        readings.unionByName(expiries)
        .select(
            "tank",
            "t",
            F.avg("level").over(window).alias("average"),
            F.max("level").over(window).alias("max_level"),
        )
        .where(F.col("average").isNotNull())  # a reading alive then
        .dropDuplicates(["tank", "t"])
        .cache()
    )
    near = (
        level_10m.join(F.broadcast(capacity.withColumnRenamed("max_level", "cap")), "tank")
        .where(F.col("average") > 0.9 * F.col("cap"))
        .select("tank", "average", F.col("cap").alias("max_level"), "t")
        .cache()
    )
    in_maintenance = (F.col("tank") == F.col("m_tank")) & (F.col("m_t") <= F.col("t"))
    alerts = near.join(
        F.broadcast(maintenance),
        in_maintenance & (F.col("t") < F.col("m_t") + 2 * HOUR),
        "left_anti",
    ).select("tank", "average", "t")
    for name, df in (
        ("level_per_minute", per_minute),
        ("level_10m", level_10m),
        ("near_capacity", near),
        ("overflow_alert", alerts),
    ):
        df.write.mode("overwrite").parquet(f"{out}/{name}")
    level_10m.unpersist()
    near.unpersist()
    return spark.read.parquet(f"{out}/overflow_alert").select("tank", "t").distinct()
