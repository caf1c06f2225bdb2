"""Budgets: a corpus that asks for too much stops with an error at its rule, on every engine,
stores nothing of that epoch (earlier epochs stay), and each budget can be raised wherever
a run is set up (`pomo run --budget`, the Dagster resource and Component, Airflow)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, HourlyPartitionsDefinition, materialize

from dagster_pomo.engine.budgets import DEFAULT, BudgetExceeded, Budgets
from dagster_pomo.engine.policy import Policy
from dagster_pomo.engine.run import run
from dagster_pomo.errors import UsageError
from dagster_pomo.lang import compile_corpus
from dagster_pomo.orchestration import pomo_definitions
from dagster_pomo.orchestration.resources import SparkResource
from tests.conftest import ROOT

POMO = Path(sys.executable).with_name("pomo")
HOUR = 3_600_000
T0 = 1_699_999_200_000  # 2023-11-14T22:00Z

# Each runaway, the budget that stops it, and the line of the rule it names.
RUNAWAYS = {
    "rounds": (".decl w(x: str);\n.decl n(x: int);\nn(0);\nn(x + 1) := n(x);\n", 4),
    "text": (".decl w(x: str);\n.decl s(x: str);\ns(x) := w(x);\ns(concat(x, x)) := s(x);\n", 4),
    "combinations": (
        ".decl w(x: str);\nc(p, q, r, s, t) := w(p) ^ w(q) ^ w(r) ^ w(s) ^ w(t);\n",
        2,
    ),
}
CHAIN = """.decl edge(a: int, b: int);
path(a, b) := edge(a, b);
path(a, c) := path(a, b) ^ edge(b, c);
"""


def _events(folder: Path, rows: list[tuple[str, list, int]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "events.jsonl").open("w") as f:
        for relation, args, t in rows:
            f.write(json.dumps({"relation": relation, "args": args, "t": t}) + "\n")
    return folder


def _thirty(folder: Path) -> Path:
    """Thirty input events in one hour: what each runaway starts from."""
    return _events(folder, [("w", [f"v{i}"], T0 + i * 1000) for i in range(30)])


@pytest.mark.parametrize("budget", list(RUNAWAYS))
def test_each_runaway_stops_at_its_rule_with_the_default_budgets(
    tmp_path: Path, budget: str
) -> None:
    text, line = RUNAWAYS[budget]
    corpus = tmp_path / f"{budget}.pomo"
    corpus.write_text(text)
    events = _thirty(tmp_path / "events")
    started = time.perf_counter()
    done = subprocess.run(
        [str(POMO), "run", str(corpus), "--events", str(events), "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,  # a guard against a run that never ends, not a measure of speed
        check=False,
    )
    print(f"{budget}: stopped after {time.perf_counter() - started:.1f} s")
    assert done.returncode == 1, done.stderr
    assert f"{corpus}:{line}:1: budget `{budget}` exceeded" in done.stderr
    assert "nothing of that epoch was stored" in done.stderr
    assert f"--budget {budget}=N" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("engine", ["reference", "spark", "local"])
@pytest.mark.parametrize("budget", list(RUNAWAYS))
def test_every_engine_stops_them(tmp_path: Path, budget: str, engine: str) -> None:
    """The reference, Spark's plans (no epoch worked out in this process) and this process
    alone (`--engine local`) stop each one too, at the same rule; low budgets keep Spark's
    rounds few."""
    text, line = RUNAWAYS[budget]
    program = compile_corpus(text, "runaway.pomo")
    budgets = Budgets(rounds=8, text=100)
    policy = Policy(budgets=budgets)
    name = engine
    events = _thirty(tmp_path / "events")
    warehouse = str(tmp_path / "warehouse")
    with pytest.raises(BudgetExceeded) as raised:
        run(program, events, HOUR, engine=name, warehouse=warehouse, policy=policy)
    assert raised.value.budget == budget
    assert raised.value.span is not None and raised.value.span.line == line
    assert f"runaway.pomo:{line}:1: budget `{budget}` exceeded" in str(raised.value)


@pytest.mark.parametrize("in_process_inputs", [1_000_000, 0], ids=["in process", "spark plans"])
def test_an_epoch_past_a_budget_stores_nothing_and_the_epochs_before_it_stay(
    tmp_path: Path, in_process_inputs: int
) -> None:
    """The first hour's chain takes 3 rounds, the second's 10: with at most 6, the first
    hour is stored whole and nothing of the second; with the default, both run."""
    chain = [("edge", [i, i + 1], T0 + i) for i in range(3)]
    chain += [("edge", [i, i + 1], T0 + HOUR + i) for i in range(10, 20)]
    events = _events(tmp_path / "events", chain)
    program = compile_corpus(CHAIN, "chain.pomo")
    warehouse = tmp_path / "warehouse"
    stored = warehouse / program.name / "path"
    for one_pass in (True, False):
        tight = Policy(one_pass, in_process_inputs, budgets=Budgets(rounds=6))
        with pytest.raises(BudgetExceeded) as raised:
            run(program, events, HOUR, warehouse=str(warehouse), policy=tight)
        assert raised.value.budget == "rounds" and raised.value.relation == "path"
        assert "2023-11-14T23:00:00Z" in str(raised.value)
        assert (stored / f"epoch={T0}").is_dir(), "the epoch before it is stored"
        assert not (stored / f"epoch={T0 + HOUR}").exists(), "nothing of the epoch past it"
        assert not (warehouse / program.name / "_deferred" / "path" / f"epoch={T0 + HOUR}").exists()
    fine = run(program, events, HOUR, warehouse=str(warehouse))
    assert len(fine.events("path")) == 3 * 4 // 2 + 10 * 11 // 2


def test_the_budget_flag_is_what_the_run_follows(tmp_path: Path) -> None:
    corpus = tmp_path / "chain.pomo"
    corpus.write_text(CHAIN)
    events = _events(tmp_path / "events", [("edge", [i, i + 1], T0 + i) for i in range(10)])

    def pomo(*more: str) -> subprocess.CompletedProcess[str]:
        args = ["run", str(corpus), "--events", str(events), "--quiet", *more]
        return subprocess.run([str(POMO), *args], capture_output=True, text=True, check=False)

    assert pomo().returncode == 0
    low = pomo("--budget", "rounds=4")
    assert low.returncode == 1 and "budget `rounds` exceeded" in low.stderr
    assert "within 4 rounds" in low.stderr
    assert pomo("--budget", "rounds=4", "--budget", "rounds=50").returncode == 0
    unknown = pomo("--budget", "loops=5")
    assert unknown.returncode == 2 and "no budget called 'loops'" in unknown.stderr


def test_budgets_read_from_settings() -> None:
    assert DEFAULT.with_settings(["rounds=500_000", "text = 10"]) == Budgets(
        rounds=500_000, text=10
    )
    assert DEFAULT.with_settings({"versions": 7}).versions == 7
    for wrong in (["rounds"], ["rounds=-1"], ["rounds=many"], {"rounds": 0}, {"rounds": True}):
        with pytest.raises(UsageError):
            DEFAULT.with_settings(wrong)


def test_a_dagster_partition_past_a_budget_fails_saying_so(tmp_path: Path) -> None:
    """The resource's ``budgets`` reach the run: the second hour's partition fails with the
    budget's message; the Component takes the same setting."""
    corpus = tmp_path / "chain.pomo"
    corpus.write_text(CHAIN)
    landing = tmp_path / "landing"
    chain = [("edge", [i, i + 1], T0 + i) for i in range(3)]
    chain += [("edge", [i, i + 1], T0 + HOUR + i) for i in range(10, 20)]
    _events(landing, chain)
    partitions = HourlyPartitionsDefinition(start_date="2023-11-14-22:00")
    spark = SparkResource(budgets={"rounds": 6})
    defs = pomo_definitions(
        corpus, partitions, str(tmp_path / "warehouse"), str(landing), spark=spark
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    instance = DagsterInstance.local_temp(str(home))
    assets, resources = list(defs.assets), dict(defs.resources)
    first = materialize(
        assets, instance=instance, resources=resources, partition_key="2023-11-14-22:00"
    )
    assert first.success
    second = materialize(
        assets,
        instance=instance,
        resources=resources,
        partition_key="2023-11-14-23:00",
        raise_on_error=False,
    )
    assert not second.success
    (failure,) = [e for e in second.all_events if e.is_step_failure]
    said = failure.event_specific_data.error.message
    assert "budget `rounds` exceeded" in said and "chain.pomo:3:1" in said
    assert "DagsterExecutionStepExecutionError" not in said, "the budget's words, first"
    assert SparkResource(budgets={"text": 9}).policy().budgets.text == 9
    with pytest.raises(UsageError):
        SparkResource(budgets={"loops": 9}).policy()


def test_airflow_takes_budgets_by_name(tmp_path: Path) -> None:
    from dagster_pomo.airflow import PomoCorpus
    from dagster_pomo.engine.pipeline import Storage

    corpus = tmp_path / "chain.pomo"
    corpus.write_text(CHAIN)
    storage = Storage(str(tmp_path / "warehouse"), str(tmp_path / "landing"))
    shared = PomoCorpus(corpus, storage, T0, HOUR, budgets={"rounds": 6})
    assert shared.policy.budgets == Budgets(rounds=6)
    with pytest.raises(UsageError):
        PomoCorpus(corpus, storage, T0, HOUR, budgets={"loops": 6})
