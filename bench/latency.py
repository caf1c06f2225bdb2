"""Landing file to actions done, through a running Dagster daemon: ``python -m bench.latency``.

What a user waits for when a file lands: the landing sensor's tick, the run's launch (the
daemon's queue, a new process, the code location loaded), the run's steps (inputs, every
stratum, the handlers) and its end. A temporary instance (``DAGSTER_HOME``), warehouse and
landing folder; ``dagster-daemon run`` over a code location holding the water tanks
(every handler recording into an outbox) and, as the peer, a job of one asset that does
nothing, launched by a sensor of its own watching another folder, with the same interval.
Each repeat lands one hour of readings (a new partition) and one peer file at the same
moment, then waits for both runs to end. The breakdown comes from the instance: the run's
creation (the sensor's tick), its start event, its steps' ends (the last handler's step:
the actions done) and its end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOCATION = '''
import os
from pathlib import Path

from dagster import (
    DefaultSensorStatus, Definitions, HourlyPartitionsDefinition, RunRequest, SkipReason, asset,
    define_asset_job, sensor,
)

from dagster_pomo.examples import outbox_handlers
from dagster_pomo.orchestration import pomo_definitions

corpus = os.environ["BENCH_CORPUS"]
warehouse, landing = os.environ["BENCH_WAREHOUSE"], os.environ["BENCH_LANDING"]
interval = int(os.environ["BENCH_INTERVAL"])
pomo = pomo_definitions(
    corpus,
    HourlyPartitionsDefinition(start_date=os.environ["BENCH_START"]),
    warehouse,
    landing,
    handlers=outbox_handlers(corpus, Path(os.environ["BENCH_OUTBOX"])),
    sensor_interval_seconds=interval,
    sensor_running=True,
)


@asset
def nothing() -> None:
    """Does nothing: what Dagster's own launch of a run costs."""


peer_job = define_asset_job("peer", selection=[nothing])
peer_folder = Path(os.environ["BENCH_PEER"])


@sensor(job=peer_job, minimum_interval_seconds=interval, default_status=DefaultSensorStatus.RUNNING)
def peer_sensor(context):
    seen = set(context.cursor.split(",")) if context.cursor else set()
    fresh = sorted(p.name for p in peer_folder.iterdir() if p.name not in seen)
    if not fresh:
        return SkipReason("no new file")
    context.update_cursor(",".join(sorted(seen | set(fresh))))
    return [RunRequest(run_key=name) for name in fresh]


peer = Definitions(assets=[nothing], jobs=[peer_job], sensors=[peer_sensor])
defs = Definitions.merge(pomo, peer)
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__)
    parser.add_argument("--readings", type=int, default=1_000, help="readings a landed hour")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--interval", type=int, default=5, help="the sensors' interval, s")
    parser.add_argument("--json", help="write every measurement here")
    args = parser.parse_args(argv)

    from dagster_pomo.examples import CORPORA, DEFAULT_START, HOUR, water_tank_events

    with tempfile.TemporaryDirectory(prefix="pomo-latency-") as tmp:
        work = Path(tmp)
        home, landing, peer = work / "home", work / "landing", work / "peer"
        for folder in (home, landing, peer):
            folder.mkdir()
        # The daemon's queue looks for runs to launch every second (its default is 5 s);
        # the sensors every `--interval` seconds.
        (home / "dagster.yaml").write_text(
            "run_coordinator:\n  module: dagster._core.run_coordinator\n"
            "  class: QueuedRunCoordinator\n  config:\n    dequeue_interval_seconds: 1\n"
            "telemetry:\n  enabled: false\n"
        )
        (work / "location.py").write_text(LOCATION)
        env = {
            **os.environ,
            "DAGSTER_HOME": str(home),
            "BENCH_CORPUS": str(CORPORA / "water_tanks.pomo"),
            "BENCH_WAREHOUSE": str(work / "wh"),
            "BENCH_LANDING": str(landing),
            "BENCH_OUTBOX": str(work / "outbox.sqlite"),
            "BENCH_PEER": str(peer),
            "BENCH_INTERVAL": str(args.interval),
            "BENCH_START": _partition_key(DEFAULT_START),
        }
        log = (work / "daemon.log").open("w")
        daemon = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("dagster-daemon")),
                "run",
                "-f",
                "location.py",
                "-a",
                "defs",
            ],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        os.environ["DAGSTER_HOME"] = str(home)
        from dagster import DagsterInstance

        instance = DagsterInstance.get()
        measured: list[dict[str, float]] = []
        try:
            _wait_for_sensors(instance, daemon, work / "daemon.log")
            for i in range(args.repeat + 1):  # the first: the daemon's code loads, unmeasured
                start = DEFAULT_START + i * HOUR
                path = landing / f"hour{i}.jsonl"
                water_tank_events(work / "staged.jsonl", args.readings, hours=1, start=start)
                landed = time.time()
                os.replace(work / "staged.jsonl", path)  # appears whole
                (peer / f"file{i}").write_text("")
                pomo_run = _run_for(instance, lambda r: r.job_name == "water_tanks", i)
                peer_run = _run_for(instance, lambda r: r.job_name == "peer", i)
                row = {
                    "pomo": _breakdown(instance, pomo_run, landed),
                    "peer": _breakdown(instance, peer_run, landed),
                }
                if i:
                    measured.append(row)
                    print(json.dumps(row))
        finally:
            with contextlib.suppress(ProcessLookupError):  # it may have ended on its own
                os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=30)
            log.close()
    _report(measured, args)
    if args.json:
        Path(args.json).write_text(json.dumps(measured, indent=1))
    return 0


def _partition_key(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d-%H:%M")


def _wait_for_sensors(instance, daemon: subprocess.Popen, log: Path) -> None:  # noqa: ANN001
    """Until the daemon has ticked both sensors once (its code location loaded)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise SystemExit(f"dagster-daemon ended:\n{log.read_text()[-3000:]}")
        states = instance.all_instigator_state()
        ticked = [s for s in states if instance.get_ticks(s.instigator_origin_id, s.selector_id)]
        if len(ticked) >= 2:
            return
        time.sleep(0.5)
    raise SystemExit(f"the sensors did not tick in 120 s:\n{log.read_text()[-3000:]}")


def _run_for(instance, wanted, count: int):  # noqa: ANN001, ANN202 (Dagster's records)
    """The ``count``-th run (from 0) that ``wanted`` picks, once it has ended."""
    from dagster import DagsterRunStatus, RunsFilter

    deadline = time.monotonic() + 600
    ended = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
    while time.monotonic() < deadline:
        runs = [r for r in instance.get_run_records(RunsFilter()) if wanted(r.dagster_run)]
        runs.sort(key=lambda r: r.create_timestamp)
        if len(runs) > count and runs[count].dagster_run.status in ended:
            record = runs[count]
            if record.dagster_run.status != DagsterRunStatus.SUCCESS:
                raise SystemExit(f"run {record.dagster_run.run_id} failed")
            return record
        time.sleep(0.2)
    raise SystemExit(f"no run {count} in 600 s")


def _breakdown(instance, record, landed: float) -> dict[str, float]:  # noqa: ANN001
    """Seconds from the file landing to each point of the run: its creation (the sensor's
    tick), its start, its first step's start, the end of its inputs step, of its last
    stratum and of its last handler's step (the actions done), and its end."""
    from dagster import DagsterEventType

    events = instance.all_logs(record.dagster_run.run_id)
    out = {"run created (sensor tick)": record.create_timestamp.timestamp() - landed}
    ends: dict[str, list[float]] = {"inputs": [], "strata": [], "actions": [], "steps": []}
    for e in events:
        kind = e.dagster_event_type
        if kind == DagsterEventType.RUN_START:
            out["run started (process up)"] = e.timestamp - landed
        elif kind == DagsterEventType.STEP_START:
            out.setdefault("first step started", e.timestamp - landed)
        elif kind == DagsterEventType.STEP_SUCCESS:
            step = e.step_key or ""
            part = "actions" if "action" in step else "inputs" if "inputs" in step else "strata"
            ends[part if "__" in step else "steps"].append(e.timestamp - landed)
        elif kind == DagsterEventType.RUN_SUCCESS:
            out["run ended"] = e.timestamp - landed
    for part, label in (
        ("steps", "step done"),
        ("inputs", "inputs stored"),
        ("strata", "strata stored"),
        ("actions", "actions done"),
    ):
        if ends[part]:
            out[label] = max(ends[part])
    out = dict(sorted(out.items(), key=lambda item: item[1]))
    # What the run itself took, whatever the phase of the sensor's interval the file hit.
    out["run: created to ended"] = out["run ended"] - out["run created (sensor tick)"]
    out["run: started to ended"] = out["run ended"] - out["run started (process up)"]
    return out


def _report(measured: list[dict[str, dict[str, float]]], args: argparse.Namespace) -> None:
    """Medians of each point, the corpus's run beside the peer's."""
    print(
        f"\n{args.readings:,} readings an hour, sensors every {args.interval} s, medians of "
        f"{len(measured)}"
    )
    keys = list(dict.fromkeys(k for row in measured for k in row["pomo"]))
    print(f"{'':<40} {'water tanks s':>14} {'nothing (peer) s':>17}")
    for key in keys:
        ours = [row["pomo"][key] for row in measured if key in row["pomo"]]
        theirs = [row["peer"][key] for row in measured if key in row["peer"]]
        a = f"{statistics.median(ours):.2f}" if ours else ""
        b = f"{statistics.median(theirs):.2f}" if theirs else ""
        print(f"{key:<40} {a:>14} {b:>17}")


if __name__ == "__main__":
    raise SystemExit(main())
