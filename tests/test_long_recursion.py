"""Long recursion on Spark: hundreds of rounds, joins with no shared variable, non-linear
and mutual recursion, each round costing what it derives, not what came before.

The counter ``c(x + 1, n) := c(x, _) ^ c(_, n) if x < n`` joins the recursive relation with
itself and shares no variable between the atoms: Catalyst estimated each round's piece as
the square of the last, and planning a round took longer and longer (forty rounds took
minutes). Small epochs run such rounds in this process; large ones on Spark's plans.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_pomo.engine.budgets import BudgetExceeded, Budgets
from dagster_pomo.engine.driver import Driver
from dagster_pomo.engine.inputs import prepare
from dagster_pomo.engine.lines import ANY_TIME
from dagster_pomo.engine.policy import Policy
from dagster_pomo.engine.run import run
from dagster_pomo.engine.spark import executors
from dagster_pomo.engine.spark.session import spark_session
from dagster_pomo.lang import compile_corpus
from tests.compare import policy

COUNTER = """.decl c(x: int, n: int);
c(0, {n});
c(x + {step}, n) := c(x, _) ^ c(_, n) if x < n;
"""


def _counted(out: dict[str, list], name: str) -> list[tuple]:
    return sorted(tuple(r.args) for r in out[name])


def _run(
    corpus: str,
    events: list[tuple[str, int, list]],
    tmp: Path,
    engine: str,
    in_process: bool = True,
    how: Policy | None = None,
) -> dict:
    program = compile_corpus(corpus, "chain.pomo")
    path = tmp / "events.jsonl"
    path.write_text(
        "".join(json.dumps({"relation": r, "t": t, "args": a}) + "\n" for r, t, a in events)
    )
    how = how or policy(in_process)
    result = run(program, path, 100, 0, 100, engine=engine, window=ANY_TIME, policy=how)
    return {name: result.events(name) for name in result.outputs}


def test_a_thousand_rounds_of_a_counter_without_shared_variables(tmp_path: Path) -> None:
    """The issue's counter at n = 1,000 on the Spark engine (a small epoch: its rounds run in
    this process), every value once; it finishes in seconds, not hours."""
    started = time.perf_counter()
    out = _run(COUNTER.format(n=1000, step=1), [], tmp_path, "auto")
    print(f"1,000 rounds in {time.perf_counter() - started:.1f} s")
    assert _counted(out, "c") == [(x, 1000) for x in range(1001)]


def test_a_chain_of_two_thousand_strata_gives_every_event_at_its_end(tmp_path: Path) -> None:
    """Two thousand rules, each a stratum reading the one before: the types, the order of the
    strata and the epoch's loop take each stratum once (they went over every stratum once
    per link: fifty seconds for thirty events)."""
    rules = ["r0(x) := w(x);", *(f"r{i}(x) := r{i - 1}(x);" for i in range(1, 2000))]
    events = [("w", t, [f"v{t}"]) for t in range(30)]
    started = time.perf_counter()
    out = _run(".decl w(x: str);\n" + "\n".join(rules) + "\n", events, tmp_path, "auto")
    print(f"2,000 strata in {time.perf_counter() - started:.1f} s")
    assert _counted(out, "r1999") == sorted((f"v{t}",) for t in range(30))
    assert len(out) == 2000 and all(len(rows) == 30 for rows in out.values())


def test_a_recursion_over_few_rows_runs_here_in_an_epoch_too_large_for_this_process(
    tmp_path: Path,
) -> None:
    """An epoch of more input events than this process takes on runs its strata on Spark,
    but a recursion whose relations hold few rows still runs its rounds here (a Spark round
    costs a job and a plan): the counter at n = 1,000 beside a stratum Spark works out.
    When a relation the recursion reads holds more rows, the recursion goes to Spark."""
    corpus = (
        COUNTER.format(n=1000, step=1)
        + """
    .decl noise(x: int);
    seen(x) := noise(x) if x < 3;
    below(x) := noise(x);
    below(y) := below(x) ^ noise(y) if y < x;
    """
    )
    program = compile_corpus(corpus, "mixed.pomo")
    events = tmp_path / "noise.jsonl"
    lines = [{"relation": "noise", "t": i, "args": [i % 7]} for i in range(60)]
    events.write_text("".join(json.dumps(line) + "\n" for line in lines))
    prepared = prepare(program, events, 100, 0, 100, ANY_TIME)

    def strata(how: Policy) -> dict[str, tuple[bool, int]]:
        driver = Driver.for_run(program, prepared, str(tmp_path / f"wh{how.lower_rows}"), how)
        stats = driver.evaluate_epoch(driver.epochs[0])
        assert stats.spark_jobs, "the epoch is Spark's"
        return {s.relations[0]: (s.in_process, s.rounds) for s in stats.strata}

    large = Policy(in_process_inputs=10)  # 60 input events: too many for this process
    ran = strata(large)
    assert ran["c"] == (True, 1001)
    assert ran["below"][0] is True  # its closure of noise reads 60 rows
    assert ran["seen"][0] is False
    ran = strata(replace(large, lower_rows=59))
    assert ran["c"] == (True, 1001)  # reads its own relation alone
    assert ran["below"][0] is False  # noise holds more rows than that: Spark's rounds


def test_spark_plans_keep_a_self_join_estimate_bounded(tmp_path: Path) -> None:
    """The same counter on Spark's plans (as a large epoch runs it, its rounds kept out of
    tasks): forty rounds, which took more than five minutes while the size estimate squared
    itself every round."""
    rounds_on_plans = replace(policy(in_process=False), task_rows=0)
    out = _run(COUNTER.format(n=40, step=1), [], tmp_path, "auto", how=rounds_on_plans)
    assert _counted(out, "c") == [(x, 40) for x in range(41)]


def _on_spark(
    tmp: Path,
    corpus: str,
    how: Policy,
    relation: str = "c",
    events: Sequence[tuple[str, int, list]] = (),
) -> tuple[list[tuple], int, int]:
    """``corpus`` in one epoch on Spark (``how``), over ``events``: the versions of
    ``relation``, the rounds its stratum ran and the Spark jobs the epoch ran."""
    program = compile_corpus(corpus, "rounds.pomo")
    path = None
    if events:
        tmp.mkdir(parents=True, exist_ok=True)
        path = tmp / f"events-{len(corpus)}-{len(events)}.jsonl"
        lines = [json.dumps({"relation": r, "t": t, "args": a}) + "\n" for r, t, a in events]
        path.write_text("".join(lines))
    prepared = prepare(program, path, 100, 0, 100, ANY_TIME)
    driver = Driver.for_run(program, prepared, str(tmp / f"wh{len(corpus)}-{how.task_rows}"), how)
    stats = driver.evaluate_epoch(driver.epochs[0])
    (stratum,) = [s for s in stats.strata if relation in s.relations]
    assert not stratum.in_process
    assert stats.spark_jobs is not None
    versions = sorted(tuple(v.args) for v in driver.versions(relation))
    return versions, stratum.rounds, stats.spark_jobs


def test_a_recursion_on_spark_runs_its_later_rounds_in_one_task_while_it_holds_the_relations(
    tmp_path: Path,
) -> None:
    """The counter (not linear: it joins its relation with itself) at n = 1,000 in an epoch
    Spark works out: after its first round on Spark's plans, its rounds run in one Spark
    task, a few jobs in all where each round on the plans takes at least one; so do two
    relations feeding each other, one step a round. A task that may know fewer versions
    than the relations grow to hands what it knows to Spark's rounds, which finish them;
    the versions are the same either way."""
    n = 1000
    spark = policy(in_process=False)
    started = time.perf_counter()
    versions, rounds, jobs = _on_spark(tmp_path, COUNTER.format(n=n, step=1), spark)
    print(f"{rounds} rounds in a task: {time.perf_counter() - started:.1f} s, {jobs} jobs")
    assert versions == [(x, n) for x in range(n + 1)]
    assert rounds == n + 1
    assert jobs < 30
    mutual = f"a(0);\na(x + 1) := b(x) if x < {n};\nb(x + 1) := a(x) if x < {n};"
    versions, rounds, jobs = _on_spark(tmp_path, mutual, spark, "a")
    assert versions == [(x,) for x in range(0, n + 1, 2)]
    assert rounds == n + 1
    assert jobs < 30
    small, left = 8, 12  # the task stops knowing more than 8; the last rounds on plans
    short = replace(spark, task_rows=small)
    n = small + left - 2
    versions, rounds, jobs = _on_spark(tmp_path, COUNTER.format(n=n, step=1), short)
    assert versions == [(x, n) for x in range(n + 1)]
    assert rounds == n + 1
    assert jobs > left  # each of Spark's rounds is a job at least
    mutual = f"a(0);\na(x + 1) := b(x) if x < {n};\nb(x + 1) := a(x) if x < {n};"
    versions, rounds, jobs = _on_spark(tmp_path, mutual, short, "b")
    assert versions == [(x,) for x in range(1, n + 1, 2)]
    assert jobs > left


CLOSURE = """.decl e(x: int, y: int);
p(x, y) := e(x, y);
p(x, z) := p(x, y) ^ e(y, z);
"""


def test_a_closure_that_outgrows_its_tasks_is_spread_over_more_of_them(tmp_path: Path) -> None:
    """A linear recursion spread on an argument its rules keep (the closure's ``x``) whose
    tasks come to know more than `Policy.task_rows` versions goes on in more tasks, those
    keys whose versions still wait to be joined only, rather than in Spark's rounds (a job
    each at least): a chain of 40 edges, 820 paths, at most 60 versions a task; their
    rounds count towards the rounds budget as the rounds that led to each. With a
    single key (the paths from one node, over 14 edges), spreading cannot help: Spark's
    rounds finish it. The versions are the rules' either way."""
    n = 40
    chain = [("e", 1, [i, i + 1]) for i in range(n)]
    spark = replace(policy(in_process=False), task_rows=60)
    versions, rounds, jobs = _on_spark(tmp_path / "spread", CLOSURE, spark, "p", chain)
    assert versions == [(x, y) for x in range(n) for y in range(x + 1, n + 1)]
    # The rounds that led to the deepest path, counted from the deepest a task was given.
    assert n + 1 <= rounds <= 2 * (n + 1), rounds
    assert jobs < n // 2, jobs
    short = replace(spark, budgets=Budgets(rounds=n - 10))  # the passes count to the budget
    with pytest.raises(BudgetExceeded, match=f"did not end within {n - 10} rounds"):
        _on_spark(tmp_path / "short", CLOSURE, short, "p", chain)
    one = CLOSURE.replace("p(x, y) := e(x, y);", "p(x, y) := e(x, y) if x == 0;")
    few = replace(spark, task_rows=8)
    versions, rounds, jobs = _on_spark(tmp_path / "one", one, few, "p", chain[:14])
    assert versions == [(0, y) for y in range(1, 15)]
    assert jobs > 14 - 8  # the rounds after the task's limit: one job each at least


def test_an_epoch_run_again_in_the_process_counts_only_its_own_spark_jobs(tmp_path: Path) -> None:
    """Each run of an epoch starts from a session not yet asked for (Spark starts with the
    first plan) in the job group the epoch had before: its count is its own jobs, not
    theirs too (the second run counted both)."""
    spark = policy(in_process=False)
    counts = [
        _on_spark(tmp_path / f"run{i}", COUNTER.format(n=3, step=1), spark)[2] for i in (1, 2)
    ]
    assert counts[0] > 0 and counts[1] == counts[0], counts


def test_rounds_go_to_a_task_only_where_executors_import_this_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The module that runs those rounds in a task goes to the executors by reference, so
    on a cluster or under Spark Connect they run there only where the executors import this
    very version of the project; one task says which (`executors.ask`, once per Spark
    application; `tests/test_cluster.py` runs the rounds on a cluster's executors). Here
    the executors are this Python."""
    spark = spark_session()
    assert executors.ask(spark)
    monkeypatch.setattr(executors, "__version__", "0.0.0+another")
    assert not executors.ask(spark), "an executor of another version must not run them"


@st.composite
def chains(draw: st.DrawFn) -> tuple[str, list[tuple[str, int, list]]]:
    """A recursive corpus whose fixpoint takes many rounds, and its events."""
    shapes = ["counter", "path", "halving", "closure", "mutual", "cross", "generation"]
    shape = draw(st.sampled_from(shapes))
    n = draw(st.integers(20, 120))
    if shape == "counter":  # joins the relation with itself, no shared variable
        return COUNTER.format(n=n, step=draw(st.integers(1, 3))), []
    if shape == "path":  # linear: one new node a round, along events
        corpus = """reach(y) := start(y);
        reach(y) := reach(x) ^ step(x, y);"""
        events = [("start", 0, [0])] + [("step", i % 7, [i, i + 1]) for i in range(n)]
        return corpus, events
    if shape == "halving":  # non-linear closure: rounds grow with the log of the length
        corpus = """p(x, y) := e(x, y);
        p(x, z) := p(x, y) ^ p(y, z);"""
        return corpus, [("e", i % 5, [i, i + 1]) for i in range(min(n, 40))]
    if shape == "closure":  # linear, spread on the argument its rules keep
        return CLOSURE, [("e", i % 5, [i, i + 1]) for i in range(min(n, 40))]
    if shape == "generation":  # two joins a round, whose partial matches repeat
        corpus = """sg(x, y) := e(p, x) ^ e(p, y) if x != y;
        sg(x, y) := e(a, x) ^ sg(a, b) ^ e(b, y);"""
        nodes = draw(st.integers(4, 16))
        times = draw(st.sampled_from([(0,), (0, 0, 3), (0, 1, 2, 3, 4)]))
        edge = st.tuples(
            st.integers(0, nodes - 1), st.integers(0, nodes - 1), st.sampled_from(times)
        )
        drawn = draw(st.lists(edge, min_size=nodes, max_size=max(nodes, min(n, 40))))
        return corpus, [("e", t, [a, b]) for a, b, t in drawn]
    if shape == "mutual":  # two relations feeding each other, one step a round
        corpus = f"""a(0);
        a(x + 1) := b(x) if x < {n};
        b(x + 1) := a(x) if x < {n};"""
        return corpus, []
    # a cross join with a lower relation, and a guard, every round
    corpus = f"""w(x) := seed(x);
    w(x + k) := w(x) ^ inc(k) if x + k <= {n};"""
    return corpus, [("seed", 0, [0]), ("inc", 1, [1]), ("inc", 2, [2])]


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(chains(), st.booleans())
def test_long_chains_give_on_spark_what_the_reference_gives(
    tmp_path_factory, chain, hand_back: bool
) -> None:
    """Worked out in this process, and on Spark's plans with the later rounds in Spark's
    tasks: as many as they take, or (``hand_back``) until a task knows all but the last few
    versions, when Spark's rounds finish what the task began."""
    corpus, events = chain
    tmp = tmp_path_factory.mktemp("chain")
    expected = _run(corpus, events, tmp, "reference")
    got = _run(corpus, events, tmp, "auto")
    spark = policy(in_process=False)
    if hand_back:
        spark = replace(spark, task_rows=max(1, max(map(len, expected.values())) - 4))
    (tmp / "spark").mkdir()
    on_spark = _run(corpus, events, tmp / "spark", "auto", how=spark)
    for name, rows in expected.items():
        want = sorted((r.args, r.t, r.exp) for r in rows)
        assert sorted((r.args, r.t, r.exp) for r in got[name]) == want, name
        assert sorted((r.args, r.t, r.exp) for r in on_spark[name]) == want, name


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    shape=st.sampled_from(["counter", "path", "mutual"]),
    n=st.integers(200, 500),
    step=st.integers(1, 3),
)
def test_hundreds_of_rounds_give_what_the_rules_say(tmp_path_factory, shape, n, step) -> None:
    """Chains of hundreds of rounds, each shape's fixpoint worked out by hand (the reference
    is too slow to run them: it joins everything again every round)."""
    tmp = tmp_path_factory.mktemp("long")
    if shape == "counter":
        corpus, events, name = COUNTER.format(n=n, step=step), [], "c"
        expected = [(x, n) for x in range(0, n + step, step) if x - step < n]
    elif shape == "path":
        corpus = "reach(y) := start(y);\nreach(y) := reach(x) ^ step(x, y);"
        events = [("start", 0, [0])] + [("step", i % 7, [i, i + step]) for i in range(0, n, step)]
        name = "reach"
        expected = [(x,) for x in range(0, n + step, step) if x - step < n]
    else:
        corpus = f"a(0);\na(x + 1) := b(x) if x < {n};\nb(x + 1) := a(x) if x < {n};"
        events, name = [], "a"
        expected = [(x,) for x in range(0, n + 1, 2)]
    got = _run(corpus, events, tmp, "auto")
    assert _counted(got, name) == expected
