"""The benchmark harness runs every workload and its peers on tiny sizes, checks each
system's output against the others and prints its tables (no timings are asserted)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench.__main__ import main


def test_the_harness_runs_every_workload_on_tiny_sizes(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "results.json"
    argv = ["w1", "w2", "w3", "--repeat", "1", "--scale", "0.02", "--graphs", "grid"]
    argv += ["--readings", "2000", "--hours", "2", "--samples", "1", "--actions", "600"]
    assert main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for peer in ("DuckDB WITH RECURSIVE", "PySpark hand-written batch", "SQLite ON CONFLICT loop"):
        assert peer in printed
    results = json.loads(out.read_text())["results"]
    w1 = results["w1"]
    assert {m["system"] for m in w1} == {"dagster-pomo", "DuckDB WITH RECURSIVE"}
    by_case: dict[str, dict[str, int]] = {}
    for m in w1:
        by_case.setdefault(m["case"], {})[m["system"]] = m["rows"]
    assert len(by_case) == 2  # tc and sg on a grid
    for case, rows in by_case.items():
        assert rows["dagster-pomo"] == rows["DuckDB WITH RECURSIVE"], case
    (ours,) = [m for m in results["w2"] if m["system"] == "dagster-pomo"]
    assert [e["epoch"] for e in ours["per_epoch"]] == [1, 2]
    assert ours["per_epoch"][-1]["state_rows_read"] > 0, "later epochs read earlier state"
    assert all(m["duplicates"] == 0 for m in results["w3"])
    assert {m["system"] for m in results["w3"]} == {
        "SQLite ON CONFLICT loop",
        "dagster-pomo",
        "dagster-pomo, PostgreSQL ledger",
    }


def test_the_cold_start_report_names_each_step_and_the_jvm_threads(capsys, monkeypatch) -> None:  # noqa: ANN001
    """`python -m bench.cold_start` times a run's steps and splits the JVM's CPU by thread
    (here in the test run's warm process: only that it reports, not what). With
    ``--spark-plans`` its small epochs run Spark's tasks."""
    from bench.cold_start import main as cold

    assert cold(["--readings", "600", "--hours", "2", "--spark-plans"]) == 0
    printed = capsys.readouterr().out
    for step in ("starting Spark", "reading and storing the inputs", "epoch 1", "epoch 2"):
        assert step in printed
    assert "JVM CPU during the epochs, by thread:" in printed
    assert "Executor task" in printed


def test_the_epoch_profile_lists_the_last_epochs_jobs_and_who_called_the_jvm(
    capsys, monkeypatch
) -> None:  # noqa: ANN001
    """`python -m bench.epoch_profile` breaks each epoch down (JVM calls, Spark jobs,
    compiled classes, the JVM's CPU and its JIT's share), lists the last epoch's jobs stage
    by stage and the warm epochs' CPU by who spent it (what it reports, not how fast)."""
    from bench.epoch_profile import main as profile

    argv = ["--readings", "600", "--hours", "2", "--callers", "--again", "1", "--spark-plans"]
    assert profile(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in printed if re.match(r"\s*\d+\s+\d+\.\d+\s+\d+\s", line)]
    assert [int(r[0]) for r in rows] == [1, 2]
    jobs = int(rows[-1][2])
    listed = [line for line in printed if line.startswith("  job ")]
    assert jobs > 0 and len(listed) == jobs, "every Spark job of the last epoch is listed"
    assert any(line.strip().startswith("stage ") for line in printed)
    assert int(rows[-1][3].replace(",", "")) > 0
    assert float(rows[-1][8]) > 0, "the JVM spent CPU on the epoch"
    assert 0 <= float(rows[-1][9]) <= float(rows[-1][8]), "the JIT's share is part of it"
    median = next(i for i, line in enumerate(printed) if line.startswith("median of the last"))
    roles = [line.split(None, 1) for line in printed[median + 1 : median + 7]]
    assert [r for _, r in roles] == [
        "JIT compilers",
        "garbage collector",
        "Spark tasks",
        "rest of the JVM",
        "Python workers",
        "this process",
    ]
    assert float(roles[2][0]) > 0 and float(roles[3][0]) > 0, "tasks ran and the driver planned"
    again = [line.split() for line in printed if line.lstrip().startswith("again ")]
    assert len(again) == 1 and int(again[0][2]) == jobs, "the last epoch again, as many jobs"
    assert any(line.startswith("median of the last epoch evaluated again") for line in printed)
    callers = printed[printed.index("the last epoch's JVM calls by engine function:") + 1 :]
    modules = {p.stem for p in (Path(__file__).parents[1] / "dagster_pomo").rglob("*.py")}
    assert callers and all(line.split()[1].split(".")[0] in modules for line in callers)


def test_growth_with_history_is_read_from_medians_of_ten_epochs() -> None:
    """One slow epoch (a busy machine) must not decide whether cost grows with history."""
    from bench.w2_epochs import _ratio, _window_ratio

    flat = [{"seconds": 1.0 + (i % 3) / 10} for i in range(100)]
    flat[-1]["seconds"] = 3.0  # one slow last epoch
    assert _ratio(flat, 10) == 3.0
    assert _window_ratio(flat, 6, 10) == 1.0
    growing = [{"seconds": 1.0 + i / 50} for i in range(100)]
    assert _window_ratio(growing, 6, 10) == round(2.89 / 1.19, 2)
    assert _window_ratio(growing[:24], 6, 10) is None, "the two windows would overlap"


def test_the_backfill_benchmark_runs_both_ways_and_checks_they_store_the_same(capsys) -> None:  # noqa: ANN001
    """`python -m bench.backfill` runs a Dagster range both ways and compares the warehouses
    (it exits with the difference otherwise); every step is in its table."""
    from bench.backfill import main as backfill

    assert backfill(["--hours", "2", "--readings", "300", "--repeat", "1"]) == 0
    printed = capsys.readouterr().out
    for step in ("water_tanks__inputs", "water_tanks__level_10m", "the run"):
        assert step in printed
    match = re.search(r"the same rows stored: ([\d,]+)", printed)
    assert match and int(match.group(1).replace(",", "")) > 300
    # `pomo run` over the same hours, its range at once against epoch by epoch.
    assert backfill(["--hours", "2", "--readings", "300", "--repeat", "1", "--pomo-run"]) == 0
    printed = capsys.readouterr().out
    assert "water_tanks__inputs" not in printed and "the run" in printed
    match = re.search(r"the same rows stored: ([\d,]+)", printed)
    assert match and int(match.group(1).replace(",", "")) > 300


def test_the_executor_operations_agree_on_every_system(capsys) -> None:  # noqa: ANN001
    """`python -m bench.executor_ops` runs each operation the local executor runs as it runs
    it and in pandas, pyarrow and DuckDB; it fails if their results differ in size."""
    from bench.executor_ops import SYSTEMS
    from bench.executor_ops import main as ops

    assert ops(["--sizes", "400", "--repeat", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [c.strip() for c in rows[0].split("|")[3:-2]] == [f"{s} ms" for s in SYSTEMS]
    assert len(rows) == 2 + 4, "a row per operation"


def test_the_check_benchmark_checks_each_corpus_and_its_peer(capsys) -> None:  # noqa: ANN001
    """`python -m bench.check_scale` checks each flat corpus in a fresh `pomo check` and the
    same rules in clingo's grounder; a run that does not report what it should fails."""
    from bench.check_scale import main as check_scale

    assert check_scale(["--rules", "120", "--repeat", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 120")]
    assert [r.split("|")[1:3] for r in rows] == [
        [" 120 rules ", " dagster-pomo "],
        [" 120 rules ", " clingo --mode=gringo "],
        [" 120 rules, PomoLogic ", " dagster-pomo "],
        [" 120 broken rules ", " dagster-pomo "],
    ]


def test_the_late_events_benchmark_stores_what_a_run_from_scratch_stores(capsys) -> None:  # noqa: ANN001
    """`python -m bench.w6_late` times the late epochs against the whole history and checks
    that evaluating the late epoch and every later one again stores what a run from scratch
    stores (it fails otherwise); the late readings show in the changes it reports."""
    from bench.w6_late import main as late

    assert late(["--readings", "2400", "--hours", "4", "--repeat", "1"]) == 0
    printed = capsys.readouterr().out
    for case in ("late, to the end", "late, every epoch", "late, what it reaches", "from scratch"):
        assert case in printed
    assert "water_level +6 -0" in printed, "the late readings are the inputs' changes"


def test_the_spark_rounds_benchmark_times_both_ways_of_running_rounds(capsys) -> None:  # noqa: ANN001
    """`python -m bench.spark_rounds` runs the counter on Spark with its rounds in a task and
    on Spark's plans, each checked against the counter's versions and rounds (an assertion
    fails otherwise), and prints a row for each with a round's cost."""
    from bench.spark_rounds import main as spark_rounds

    args = ["--small", "1", "--large", "4", "--plans-large", "3", "--repeat", "1"]
    assert spark_rounds(args) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows[2:]] == [
        "rounds in one task",
        "Spark's plans (task_rows=0)",
    ]
    assert all(re.search(r"\| -?[\d.]+ ms \|$", r) for r in rows[2:])


def test_the_spark_rounds_benchmark_times_a_closure_past_what_a_task_may_know(capsys) -> None:  # noqa: ANN001
    """``--closure`` times a chain's closure with its tasks allowed fewer versions than it
    has (``--task-rows``), and on Spark's plans, each run's paths checked (an assertion
    fails otherwise), a row for each."""
    from bench.spark_rounds import main as spark_rounds

    args = ["--closure", "--small", "3", "--large", "12", "--plans-large", "5", "--repeat", "1"]
    assert spark_rounds([*args, "--task-rows", "20"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows[2:]] == [
        "rounds in tasks, spread past task_rows=20",
        "Spark's plans (task_rows=0)",
    ]
    assert "(13 rounds)" in rows[2]


def test_the_whole_run_benchmark_times_every_process_and_checks_their_outputs(capsys) -> None:  # noqa: ANN001
    """`python -m bench.whole_run` times `pomo run --out` and its peers as fresh processes,
    each output counted against DuckDB's (the harness exits 1 when they differ), and prints
    a row for each with its ratio to DuckDB. `--program sg` runs same generation: every
    process writes its pairs, not the closure's."""
    from bench.w1_recursion import gnp
    from bench.whole_run import main as whole_run

    assert whole_run(["--nodes", "12", "--edges", "24", "--repeat", "1", "--program", "sg"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("same generation of G(12, 24)")
    rows = [line for line in printed if line.startswith("| ")]
    names = [r.split("|")[1].strip() for r in rows[2:]]
    assert names == [
        "pomo run --out",
        "the same, the libraries' memory settings",
        "on Spark",
        "collected",
        "DuckDB",
    ]
    edges = gnp(12, 24, seed=1)
    sg = {(x, y) for p, x in edges for q, y in edges if p == q and x != y}
    while more := {(x, y) for a, x in edges for b, y in edges if (a, b) in sg} - sg:
        sg |= more
    closure = set(edges)
    while more := {(a, c) for a, b in closure for b2, c in edges if b == b2} - closure:
        closure |= more
    assert len(sg) != len(closure), "the graph tells the two programs apart"
    counts = {int(r.split("|")[-2].strip().replace(",", "")) for r in rows[2:]}
    assert counts == {len(sg)}, "every process wrote the same generation's pairs"
