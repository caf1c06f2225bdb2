"""`pomo run --engine local`: every stratum worked out in this process, with no JVM.

Each example corpus runs as a user would run it on a machine without Java (no `java` on
the `PATH`, no `JAVA_HOME`), over events generated for its input relations, and writes
what the reference evaluator derives from them. The same command on Spark fails there
for want of Java: the local run did not lean on a JVM found some other way.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from dagster_pomo.engine.lines import ANY_TIME
from dagster_pomo.engine.run import event_json, run
from dagster_pomo.lang import Program, load_program
from tests.conftest import ROOT, RULES

POMO = Path(sys.executable).with_name("pomo")
HOUR = 3_600_000
START = 1_700_000_000_000 // HOUR * HOUR
CORPORA = sorted(RULES.glob("*.pomo"))


def _no_java() -> dict[str, str]:
    """This environment without Java: no `JAVA_HOME`, and a `PATH` of the virtual
    environment's scripts alone."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env["PATH"] = str(POMO.parent)
    return env


def _pomo_without_java(*args: str) -> subprocess.CompletedProcess[str]:
    """``pomo args...`` run as on a machine without Java (`_no_java`)."""
    return subprocess.run(
        [str(POMO), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_no_java(),
        timeout=300,
        check=False,
    )


def _value(kind: str, rng: random.Random) -> Any:
    """A value of a column's type from a small pool, so that joins and groups meet."""
    if kind == "int":
        return rng.randrange(0, 6)
    if kind == "float":
        return round(rng.uniform(0, 150), 1)
    if kind == "bool":
        return rng.random() < 0.5
    return rng.choice(["ann", "bob", "cy", "north", "south"])


def _events(program: Program, path: Path, seed: int) -> None:
    """Events of every input relation of ``program`` over five hours (some at one time, some
    repeated), as a JSON Lines landing file."""
    rng = random.Random(seed)
    lines = []
    inputs = [r for r in program.catalog.inputs if r.columns]
    for _ in range(400):
        rel = rng.choice(inputs)
        t = START + rng.randrange(0, 5 * HOUR, 60_000)
        args = [_value(kind, rng) for kind in rel.types]
        lines.append(json.dumps({"relation": rel.name, "t": t, "args": args}) + "\n")
    lines += lines[:20]  # repeated events count once, on every engine
    path.write_text("".join(lines))


def _read(out: Path) -> dict[str, list[dict]]:
    """The files a run wrote, floats to 9 places (engines sum in different orders)."""
    return {
        p.name: [json.loads(line, parse_float=lambda f: round(float(f), 9)) for line in p.open()]
        for p in sorted(out.glob("*.jsonl"))
    }


@pytest.mark.parametrize("corpus", CORPORA, ids=[p.stem for p in CORPORA])
def test_every_example_runs_locally_without_java_as_the_reference_does(
    tmp_path: Path, corpus: Path
) -> None:
    program = load_program(corpus)
    events = tmp_path / "events.jsonl"
    _events(program, events, seed=len(corpus.stem))
    out = tmp_path / "local"
    done = _pomo_without_java(
        *("run", str(corpus), "--events", str(events), "--engine", "local"),
        *("--times", "any", "--out", str(out)),
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a `.check` failed, said
    assert "Traceback" not in done.stderr and "spark:" not in done.stderr
    assert "in this process" in done.stderr  # the summary says where the passes ran
    expected = run(program, events, HOUR, engine="reference", window=ANY_TIME)
    written = {
        f"{name}.jsonl": [event_json(program, name, row) for row in expected.events(name)]
        for name in expected.outputs
    }
    got = _read(out)
    got.pop("_quarantine.jsonl")
    assert got == json.loads(json.dumps(written), parse_float=lambda f: round(float(f), 9))
    assert sum(map(len, got.values())) > 0, "the events derive something"


def test_spark_fails_where_there_is_no_java(tmp_path: Path) -> None:
    """The environment of the test above really has no Java: the Spark engine stops there,
    saying so and how to get one."""
    corpus = RULES / "water_tanks.pomo"
    events = tmp_path / "events.jsonl"
    _events(load_program(corpus), events, seed=1)
    done = _pomo_without_java(
        *("run", str(corpus), "--events", str(events), "--engine", "spark"),
        *("--times", "any", "--quiet"),
    )
    assert done.returncode != 0
    assert "Java 17+ is needed" in done.stderr, done.stderr[-3000:]


def test_a_warehouse_elsewhere_is_refused_with_the_reason(tmp_path: Path) -> None:
    """This process reads and writes a local engine's warehouse itself: a URL it cannot
    open as a folder is an error naming it, before anything runs."""
    from dagster_pomo.errors import UsageError

    program = load_program(RULES / "water_tanks.pomo")
    events = tmp_path / "events.jsonl"
    _events(program, events, seed=2)
    with pytest.raises(UsageError, match="s3a://bucket/wh is not a folder on this machine"):
        run(program, events, HOUR, engine="local", warehouse="s3a://bucket/wh", window=ANY_TIME)


def test_a_join_past_the_budget_says_how_to_go_on(tmp_path: Path) -> None:
    """With nowhere to send a join too large for it, the local engine stops with an error
    that names the relation and the two ways on (a larger budget, another engine)."""
    corpus = tmp_path / "j.pomo"
    corpus.write_text(".decl e(a: int, b: int);\np(a, c) := e(a, b) ^ e(b, c);\n")
    lines = [{"relation": "e", "t": START + k, "args": [0, k % 2]} for k in range(40)]
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(x) + "\n" for x in lines))
    args = [str(POMO), "run", str(corpus), "--events", str(events), "--engine", "local"]
    args += ["--times", "any", "--budget", "combinations=100"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert "`p` of 2023-11-14T22:00:00Z" in done.stderr
    assert "--budget combinations=N" in done.stderr and "--engine auto" in done.stderr
    assert "Traceback" not in done.stderr
    args[args.index("combinations=100")] = "combinations=10000"
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    expected = run(load_program(corpus), events, HOUR, engine="reference", window=ANY_TIME)
    assert f"p ({len(expected.events('p'))} events)" in done.stdout


DAGSTER_RUN = """
import sys
from pathlib import Path

from dagster import DagsterInstance

from dagster_pomo.orchestration import SparkResource
from tests.conftest import RULES
from tests.test_dagster_assets import KEYS, PARTITIONS, _defs, _materialize_range

tmp = Path(sys.argv[1])
local = SparkResource(engine="local")
defs = _defs(RULES / "water_tanks.pomo", PARTITIONS, tmp / "warehouse", tmp / "landing", local)
(tmp / "home").mkdir()
result = _materialize_range(defs, DagsterInstance.local_temp(str(tmp / "home")), KEYS)
events = result.asset_materializations_for_node("water_tanks__level_10m")
print(sum(e.metadata["pomo/new_rows"].value for e in events))
"""


def test_a_dagster_run_on_the_local_engine_needs_no_java(tmp_path: Path) -> None:
    """`SparkResource(engine="local")`: a Dagster run of every asset of the water tanks
    (the actions too) over three hourly partitions, on a machine without Java, stores what
    the reference derives, and its metadata counts the rows stored."""
    from dagster_pomo.examples import water_tank_events
    from tests.test_dagster_assets import KEYS, PARTITIONS, _assert_stored_equals_reference

    landing = tmp_path / "landing"
    landing.mkdir()
    water_tank_events(landing / "tanks.jsonl", 2_000, tanks=3, hours=3)
    done = subprocess.run(
        [sys.executable, "-c", DAGSTER_RUN, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_no_java(),
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    program = load_program(RULES / "water_tanks.pomo")
    warehouse = tmp_path / "warehouse"
    _assert_stored_equals_reference(program, warehouse, landing, PARTITIONS, KEYS)
    files = (warehouse / "water_tanks" / "level_10m").rglob("*.parquet")
    stored = sum(pq.read_metadata(f).num_rows for f in files)
    assert stored > 0 and int(done.stdout.strip().splitlines()[-1]) == stored
