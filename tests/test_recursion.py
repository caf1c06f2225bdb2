"""Recursive strata whose later rounds run inside Spark tasks
(``engine/local/linear_fixpoint.py``): they give what the reference gives and what Spark's
own rounds give, hand over to Spark's rounds when a task knows too many versions, and
spare the Spark job a round would otherwise cost."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from dagster_pomo.engine import event_lines
from dagster_pomo.engine.driver import Driver
from dagster_pomo.engine.inputs import prepare
from dagster_pomo.engine.lines import ANY_TIME
from dagster_pomo.engine.local import linear_fixpoint
from dagster_pomo.engine.local import stratum as local_stratum
from dagster_pomo.engine.policy import DEFAULT, Policy
from dagster_pomo.engine.run import event_json, run
from dagster_pomo.engine.spark import warehouse
from dagster_pomo.lang import compile_corpus

CLOSURE = """
.decl edge(a: int, b: int) lifetime 30;
.decl path(a: int, b: int);
path(a, b) := edge(a, b);
path(a, c) := path(a, b) ^ edge(b, c);
"""
# The closure goes around nodes blocked when it gets there; same generation keeps apart
# the nodes it pairs: a negation and a guard in recursive rules, which tasks evaluate too.
CORPUS = """
.decl edge(a: int, b: int) lifetime 30;
.decl blocked(n: int) lifetime 15;
.decl path(a: int, b: int);
.decl sg(a: int, b: int);
path(a, b) := edge(a, b);
path(a, c) := path(a, b) ^ edge(b, c) ^ !blocked(c);
sg(x, y) := edge(p, x) ^ edge(p, y) if x != y;
sg(x, y) := edge(a, x) ^ sg(a, b) ^ edge(b, y) if x != y;
"""
UNTIL, EPOCH = 40, 20


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> Path:
    """A 7-node cycle at time 0, that expires at 30, and edges arriving later, some of
    them the same edge again (a longer-living version of a known path)."""
    rng = random.Random(11)
    lines = [{"relation": "edge", "t": 0, "args": [i, (i + 1) % 7]} for i in range(7)]
    for _ in range(24):
        a, b = rng.randrange(9), rng.randrange(9)
        lines.append({"relation": "edge", "t": rng.randrange(UNTIL), "args": [a, b]})
    for _ in range(6):
        lines.append({"relation": "blocked", "t": rng.randrange(UNTIL), "args": [rng.randrange(9)]})
    path = tmp_path_factory.mktemp("edges") / "events.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def expected(events: Path) -> dict[str, list]:
    return _outcome(events, "reference", UNTIL)


def _outcome(events: Path, engine: str, epoch: int, how: Policy = DEFAULT) -> dict[str, list]:
    program = compile_corpus(CORPUS, "graph.pomo")
    result = run(
        program, events, epoch, start=0, until=UNTIL, engine=engine, window=ANY_TIME, policy=how
    )
    return {
        name: sorted(json.dumps(event_json(program, name, row)) for row in result.events(name))
        for name in ("path", "sg")
    }


SPARK = Policy(in_process_inputs=0)  # every epoch on Spark's plans and tasks


@pytest.mark.parametrize(
    ("task_rows", "cells", "here"),
    [
        # The tasks reach the fixpoint, finding versions by address (small integer keys).
        (DEFAULT.task_rows, linear_fixpoint.CELLS, False),
        # The tasks stop part-way, and Spark's rounds go on from there; versions by hash.
        (30, 0, False),
        (0, linear_fixpoint.CELLS, False),  # Spark's rounds only
        # Small epochs in this process: the rounds on the tasks' executor, here (the
        # relation spread over threads however few its versions) ...
        (DEFAULT.task_rows, linear_fixpoint.CELLS, True),
        # ... which gives up past 30 versions: the stratum goes to Spark, as above ...
        (30, 0, True),
        (0, linear_fixpoint.CELLS, True),  # ... or every round on pandas frames
    ],
)
def test_rounds_in_tasks_give_what_the_reference_gives(
    events: Path, expected: dict[str, list], monkeypatch, task_rows: int, cells: int, here: bool
) -> None:
    monkeypatch.setattr(
        linear_fixpoint, "CELLS", cells
    )  # tasks get the module by value: as patched
    monkeypatch.setattr(local_stratum, "SPREAD_ROWS", 0)
    assert len(expected["path"]) > 60 and expected["sg"], "the case must recurse a fair amount"
    # Epoch by epoch (later epochs' rounds start from versions of earlier ones), and in one.
    how = replace(DEFAULT if here else SPARK, task_rows=task_rows)
    for size in (EPOCH, UNTIL) if task_rows == DEFAULT.task_rows else (EPOCH,):
        assert _outcome(events, "auto", size, how) == expected, size


def test_a_long_recursion_costs_a_few_spark_jobs_not_one_a_round(tmp_path: Path) -> None:
    """The closure of a 30-node cycle needs 31 rounds; in tasks they are one Spark job."""
    program = compile_corpus(CLOSURE, "closure.pomo")
    lines = [{"relation": "edge", "t": 0, "args": [i, (i + 1) % 30]} for i in range(30)]
    events = tmp_path / "cycle.jsonl"
    events.write_text("".join(json.dumps(line) + "\n" for line in lines))
    prepared = prepare(program, events, 10, 0, 10, ANY_TIME)

    def closure(warehouse: str, how: Policy = DEFAULT) -> tuple[int, int | None, int]:
        evaluator = Driver.for_run(program, prepared, str(tmp_path / warehouse), policy=how)
        stats = evaluator.evaluate_epoch(evaluator.epochs[0])
        (path,) = [s for s in stats.strata if s.relations == ("path",)]
        return path.rounds, stats.spark_jobs, path.rows["path"]

    ran, jobs, rows = closure("tasks", SPARK)
    assert (ran, rows) == (31, 30 * 30)
    assert jobs is not None and jobs < 20

    spark_rounds, spark_jobs, spark_rows = closure(
        "spark", Policy(task_rows=0, in_process_inputs=0)
    )
    assert (spark_rounds, spark_rows) == (31, 30 * 30)
    assert spark_jobs is not None and spark_jobs > 31


def test_tasks_that_fail_leave_the_stored_epoch_as_it_was(tmp_path: Path, monkeypatch) -> None:
    """The rounds' tasks write the relation's epoch themselves (also under a warehouse
    named relative to the folder the run started in, which Spark's Python workers need
    not share); when one fails, the epoch written before is still there whole, and
    nothing half-written is left beside it."""
    program = compile_corpus(CLOSURE, "closure.pomo")
    lines = [{"relation": "edge", "t": 0, "args": [i, (i + 1) % 12]} for i in range(12)]
    events = tmp_path / "cycle.jsonl"
    events.write_text("".join(json.dumps(line) + "\n" for line in lines))
    prepared = prepare(program, events, 10, 0, 10, ANY_TIME)
    warehouse = tmp_path / "wh"
    evaluator = Driver.for_run(
        program, prepared, str(warehouse), policy=SPARK
    )  # workers start here
    assert evaluator.evaluate_epoch(evaluator.epochs[0]).strata[-1].rows["path"] == 12 * 12
    monkeypatch.chdir(tmp_path)
    evaluator = Driver.for_run(program, prepared, "wh", policy=SPARK)
    stats = evaluator.evaluate_epoch(evaluator.epochs[0])
    assert stats.strata[-1].rows["path"] == 12 * 12
    stored = warehouse / "closure" / "path"

    def files() -> dict[str, bytes]:
        return {str(f.relative_to(stored)): f.read_bytes() for f in stored.rglob("*.parquet")}

    before = files()
    assert before
    staging = warehouse / "closure" / "_staging"
    assert not staging.exists()  # once written, the warehouse holds relations only

    def broken(*args, **kwargs):
        raise RuntimeError("a task ran out of luck")

    monkeypatch.setattr(linear_fixpoint, "fixpoint", broken)  # tasks get the module by value
    again = Driver.for_run(program, prepared, "wh", policy=SPARK)
    with pytest.raises(Exception, match="out of luck"):
        again.evaluate_epoch(again.epochs[0])
    assert files() == before
    assert not staging.exists()


def test_a_small_epochs_linear_recursion_runs_here_on_the_tasks_executor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small epoch's closure is worked out in this process, its rounds after the first on
    the executor Spark's tasks use (no Spark job), and ``pomo run --out`` writes its events
    from Arrow: the bytes that Spark's plans, tasks and writer give."""
    program = compile_corpus(CLOSURE, "closure.pomo")
    lines = [{"relation": "edge", "t": 0, "args": [i, (i + 1) % 30]} for i in range(30)]
    lines += [{"relation": "edge", "t": 3, "args": [i, 40 + i % 3]} for i in range(0, 30, 4)]
    events = tmp_path / "cycle.jsonl"
    events.write_text("".join(json.dumps(line) + "\n" for line in lines))
    prepared = prepare(program, events, 10, 0, 10, ANY_TIME)
    driver = Driver.for_run(program, prepared, str(tmp_path / "here"))
    stats = driver.evaluate_epoch(driver.epochs[0])
    (path,) = [s for s in stats.strata if s.relations == ("path",)]
    assert (path.in_process, path.rounds, stats.spark_jobs) == (True, 31, 0)

    def written(how: Policy, name: str) -> bytes:
        out = tmp_path / name
        wh = str(tmp_path / f"wh-{name}")
        run(program, events, 10, 0, 10, window=ANY_TIME, warehouse=wh, out=out, policy=how)
        return (out / "path.jsonl").read_bytes()

    here = written(DEFAULT, "here")
    assert here.count(b"\n") == 30 * 30 + 30 * 3  # and each node to 40, 41 and 42 at 3
    monkeypatch.setattr(warehouse, "LOCAL_ROWS", 0)  # Spark writes the lines too
    monkeypatch.setattr(event_lines, "ROWS", -1)
    assert here == written(SPARK, "spark")


def test_partial_matches_met_before_are_not_joined_again_and_change_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same generation on a random graph, its edges landing in three epochs (the last ones
    with a lifetime): a partial match `(x, b)` that many `(a, b)` make goes on to its second
    join once, and the rounds make what the reference makes, epoch by epoch and in one
    epoch, in this process alone and on Spark's tasks."""
    corpus = """
    .decl edge(a: int, b: int);
    .decl short(a: int, b: int) lifetime 4;
    .decl link(a: int, b: int);
    .decl sg(a: int, b: int);
    link(a, b) := edge(a, b);
    link(a, b) := short(a, b);
    sg(x, y) := link(p, x) ^ link(p, y) if x != y;
    sg(x, y) := link(a, x) ^ sg(a, b) ^ link(b, y);
    """
    rng = random.Random(5)
    lines = [
        {
            "relation": "short" if t == 8 and rng.random() < 0.5 else "edge",
            "t": t,
            "args": [rng.randrange(40), rng.randrange(40)],
        }
        for t in (0, 0, 0, 4, 8) * 24
    ]
    events = tmp_path / "graph.jsonl"
    events.write_text("".join(json.dumps(line) + "\n" for line in lines))
    program = compile_corpus(corpus, "sg.pomo")
    given, kept = [0], [0]
    unmet = linear_fixpoint._Met.unmet

    def counted(self, df, times):  # noqa: ANN001, ANN202
        rows = unmet(self, df, times)
        if rows is not None:
            given[0] += len(next(iter(df.values())))
            kept[0] += len(rows)
        return rows

    monkeypatch.setattr(linear_fixpoint._Met, "unmet", counted)

    def outcome(engine: str, epoch: int, how: Policy = DEFAULT) -> list[str]:
        result = run(program, events, epoch, 0, 12, engine=engine, window=ANY_TIME, policy=how)
        return sorted(json.dumps(event_json(program, "sg", row)) for row in result.events("sg"))

    expected = outcome("reference", 12)
    assert len(expected) > 500
    for epoch in (4, 12):
        assert outcome("local", epoch) == expected, epoch
        assert outcome("auto", epoch, SPARK) == expected, epoch
    assert kept[0] < given[0] / 2, "most partial matches were met before"
