"""Differential tests on generated corpora and event streams.

- The reference evaluator gives the same events whatever the epoch size (docs/semantics.md, Epochs),
  for corpora without ``@next``, the one construct whose results depend on it.
- The Spark engine, epoch by epoch and in one batch, gives what the reference gives with
  the same epochs, with its plans interpreted (small epochs) and compiled, and with small
  epochs worked out in this process.
- A range in one pass (Spark's plans) stores what epoch by epoch (small epochs in this
  process) stores, folder by folder.

Spark pays a fixed cost per epoch, so its example count is small by default; set
``POMO_SPARK_EXAMPLES`` for a longer run.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_pomo.engine.lines import ANY_TIME
from dagster_pomo.engine.local import stratum as local_stratum
from dagster_pomo.engine.policy import DEFAULT, Policy
from dagster_pomo.engine.run import event_json, run
from dagster_pomo.engine.spark.session import spark_session
from dagster_pomo.lang import compile_corpus
from tests.compare import policy
from tests.engine_strategies import (
    KINDS,
    Case,
    cases,
    corpora,
    event_streams,
    landing_line,
    with_provenance,
)

HORIZON_END = 48  # every stream ends before this; a multiple of the epoch sizes below
SPARK_EXAMPLES = int(os.environ.get("POMO_SPARK_EXAMPLES", "10"))
TIMELESS = tuple(k for k in KINDS if k not in ("next", "async"))
timeless_cases = st.builds(Case, corpora(TIMELESS), event_streams())
# The settings of the Spark property tests on one construct: half the examples, the same
# ones every run.
few_spark_examples = settings(
    max_examples=max(1, SPARK_EXAMPLES // 2),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)


def _normal(value: Any) -> Any:
    """Floats to 9 significant digits, within lists, tuples, dicts and a Counter's keys:
    averages summed in another order differ in the last bits."""
    if isinstance(value, float):
        return float(f"{value:.9g}") if math.isfinite(value) else value
    if isinstance(value, list | tuple):
        return type(value)(_normal(v) for v in value)
    if isinstance(value, Counter):
        return Counter({_normal(k): n for k, n in value.items()})
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


def _events_file(case: Case, tmp: Path) -> Path:
    """The case's events as a JSON Lines file in ``tmp``."""
    path = tmp / "events.jsonl"
    catalog = compile_corpus(case.corpus, "generated.pomo").catalog
    columns = {r.name: r.columns for r in catalog.inputs}
    path.write_text("".join(landing_line(e, columns.get(e[0], ())) + "\n" for e in case.events))
    return path


def outcome(
    case: Case, tmp: Path, epoch: int, engine: str, how: Policy = DEFAULT
) -> dict[str, list[dict]]:
    program = compile_corpus(case.corpus, "generated.pomo")
    path = _events_file(case, tmp)
    result = run(program, path, epoch, 0, HORIZON_END, engine=engine, window=ANY_TIME, policy=how)
    assert not result.ingested.quarantined_count, result.ingested.quarantined  # every form reads
    return {
        name: [_normal(event_json(program, name, row)) for row in result.events(name)]
        for name in result.outputs
    }


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(timeless_cases)
def test_reference_does_not_depend_on_the_epoch_size(tmp_path_factory, case: Case) -> None:
    tmp = tmp_path_factory.mktemp("ref")
    batch = outcome(case, tmp, HORIZON_END, "reference")
    for size in (1, 6, 16):
        assert outcome(case, tmp, size, "reference") == batch, size


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.builds(Case, with_provenance(corpora(TIMELESS)), event_streams()))
def test_provenance_does_not_depend_on_the_epoch_size(tmp_path_factory, case: Case) -> None:
    """The content IDs each derived event rests on (`@provenance`, merged over its versions
    and derivations) are the same in one batch and epoch by epoch, on the reference."""
    tmp = tmp_path_factory.mktemp("lineage")
    batch = outcome(case, tmp, HORIZON_END, "reference")
    catalog = compile_corpus(case.corpus, "generated.pomo").catalog
    for name, events in batch.items():  # carriers' events carry it, the others' do not
        assert all(("provenance" in e) == catalog[name].provenance for e in events), name
    for size in (1, 6, 16):
        assert outcome(case, tmp, size, "reference") == batch, size


@settings(
    max_examples=SPARK_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
@given(cases)
def test_spark_gives_what_the_reference_gives(tmp_path_factory, case: Case) -> None:
    """Spark's plans, this process for small epochs, and this process alone (`--engine
    local`) give what the reference gives. Epochs this small run Spark's plans
    interpreted; the one-epoch run is made to compile them, as a large epoch does
    (`SparkEvaluator.plans_for`), so both ways are checked. Epochs of 12 run as `pomo run`
    does (a range at once where it can), of 16 epoch by epoch, as a schedule does, the
    stored epochs read through Spark's scans (the others, being few, as local relations)."""
    tmp = tmp_path_factory.mktemp("spark")
    batch = outcome(case, tmp, HORIZON_END, "reference")
    for size in (12, 16, HORIZON_END):
        expected = outcome(case, tmp, size, "reference") if case.sequential else batch
        with generated_code(size == HORIZON_END):
            how = policy(in_process=False, one_pass=size != 16, scans=size == 16)
            assert outcome(case, tmp, size, "auto", how) == expected, size
        if size != 12:  # and as this process works small epochs out (a range never is)
            how = policy(in_process=True, one_pass=False)
            # epochs of 16: a linear recursion's rounds spread over threads however few
            spread = 0 if size == 16 else local_stratum.SPREAD_ROWS
            with patch.object(local_stratum, "SPREAD_ROWS", spread):
                assert outcome(case, tmp, size, "auto", how) == expected, size
        if size != 12:  # and as this process alone works every epoch out (`--engine local`)
            assert outcome(case, tmp, size, "local") == expected, size


def _same_on_every_engine(case: Case, tmp: Path) -> None:
    """Spark's plans (a range at once, and epoch by epoch reading through Spark's scans),
    this process's and this process alone's give what the reference gives in one batch."""
    batch = outcome(case, tmp, HORIZON_END, "reference")
    for size in (12, 16):
        how = policy(in_process=False, one_pass=size != 16, scans=size == 16)
        assert outcome(case, tmp, size, "auto", how) == batch, size
    assert outcome(case, tmp, 16, "auto", policy(in_process=True, one_pass=False)) == batch
    assert outcome(case, tmp, 16, "local") == batch


@few_spark_examples
@given(st.builds(Case, corpora(("clock", "timed_agg", "read_agg", "clock")), event_streams()))
def test_clock_aggregates_are_the_same_on_every_engine_and_epoch_size(
    tmp_path_factory, case: Case
) -> None:
    """Aggregates over clock ticks, stamped at the tick or the period before it or later:
    each group's matches are made at one time, a grouping on Spark (`at_one_time`)."""
    _same_on_every_engine(case, tmp_path_factory.mktemp("clock"))


@few_spark_examples
@given(st.builds(Case, corpora(("cid", "join", "const", "cid")), event_streams()))
def test_content_ids_are_the_same_on_every_engine_and_epoch_size(
    tmp_path_factory, case: Case
) -> None:
    """Corpora that store content IDs, match them again and compare them: Spark's plans
    (a range at once and epoch by epoch) and this process's give what the reference
    gives in one batch."""
    _same_on_every_engine(case, tmp_path_factory.mktemp("cids"))


@few_spark_examples
@given(st.builds(Case, corpora(("body_agg", "join", "negate", "body_agg")), event_streams()))
def test_body_aggregates_are_the_same_on_every_engine_and_epoch_size(
    tmp_path_factory, case: Case
) -> None:
    """Body aggregates grouped or not, several in a rule, compared in guards, over what other
    rules derive: Spark's plans (a range at once and epoch by epoch) and this process's
    give what the reference gives in one batch."""
    _same_on_every_engine(case, tmp_path_factory.mktemp("summaries"))


@few_spark_examples
@given(
    st.builds(
        Case,
        with_provenance(
            corpora(("recursive", "aggregate", "timed_agg", "join", "union", "negate", "time"))
        ),
        event_streams(),
    )
)
def test_provenance_is_the_same_on_every_engine_and_epoch_size(
    tmp_path_factory, case: Case
) -> None:
    """`@provenance` through joins, unions, recursion (rounds merge it as they go), sliding
    aggregates and events stamped later: Spark's plans (a range at once and epoch by epoch)
    and this process's (which leaves carriers to Spark) give what the reference gives in
    one batch."""
    _same_on_every_engine(case, tmp_path_factory.mktemp("provenance"))


# Text as keys: every way a rule compares text (a join, a negation, a group, a body
# aggregate's group, a recursion's rounds, versions merged from two rules), over values
# that differ only after a NUL character, in case, by a combining mark, or not at all.
TEXT_CORPUS = """.decl e(a: str, b: str) lifetime 20;
.decl s(a: str) lifetime 15;
path(a, b) := e(a, b);
path(a, c) := path(a, b) ^ e(b, c);
free(a, b) := e(a, b) ^ !s(a);
n(a) @count := e(a, b);
marked(a, k) := s(a) ^ k = count : e(a, _);
seen(a) := e(a, _);
seen(a) := s(a);
"""
TEXTS = st.sampled_from(["", "a", "A", "a\x00", "a\x00b", "\x00", "é", "e\u0301", "水", " a"])


@st.composite
def text_events(draw: st.DrawFn) -> list[tuple[str, int, list[str]]]:
    events = []
    for _ in range(draw(st.integers(0, 16))):
        rel = draw(st.sampled_from(["e", "e", "s"]))
        args = [draw(TEXTS) for _ in range(2 if rel == "e" else 1)]
        events.append((rel, draw(st.integers(0, 40)), args))
    return events


@few_spark_examples
@given(st.builds(Case, st.just(TEXT_CORPUS), text_events()))
def test_text_keys_are_the_same_on_every_engine_and_epoch_size(
    tmp_path_factory, case: Case
) -> None:
    """Text compares whole (NUL characters, case, combining marks) in joins, negations,
    groups, recursion's rounds and merged versions: Spark's plans (a range at once and
    epoch by epoch) and this process's give what the reference gives in one batch."""
    _same_on_every_engine(case, tmp_path_factory.mktemp("text"))


@few_spark_examples
@given(
    st.builds(
        Case,
        st.one_of(
            corpora(("async", "join", "negate", "async", "next")),
            with_provenance(corpora(("async", "join", "next"))),
        ),
        event_streams(),
    )
)
def test_async_messages_are_the_same_on_spark_and_the_reference(
    tmp_path_factory, case: Case
) -> None:
    """`@async` messages (negated as of their match's time), what later rules derive from
    them, beside `@next` state: Spark's plans give what the reference gives, epoch by epoch
    and for each epoch size (a message is delivered at the next epoch's start, so results
    depend on the epochs, as `@next`'s do)."""
    tmp = tmp_path_factory.mktemp("messages")
    for size in (6, 16):
        expected = outcome(case, tmp, size, "reference")
        assert outcome(case, tmp, size, "auto", policy(False, False)) == expected, size


@few_spark_examples
@given(timeless_cases)
def test_a_range_in_one_pass_stores_what_epoch_by_epoch_stores(
    tmp_path_factory, case: Case
) -> None:
    """Every partition, and every epoch's deferred events, as a Dagster range run stores
    them (each stratum over the range in one pass, but a recursive one that defers events)
    and as a schedule does, epoch by epoch; a later run of one epoch then changes nothing."""
    from dagster_pomo.engine.driver import Driver
    from dagster_pomo.engine.inputs import prepare
    from tests.test_warehouse import RANGES, _over_range, by_epoch, partitions

    tmp = tmp_path_factory.mktemp("ranges")
    program = compile_corpus(case.corpus, "generated.pomo")
    path = _events_file(case, tmp)
    stored = {}
    for way in ("stepwise", "ranged"):
        evaluator = Driver.for_run(
            program,
            prepare(program, path, 12, 0, HORIZON_END, ANY_TIME),
            str(tmp / way),
            policy=RANGES,
        )
        if way == "stepwise":
            for epoch in evaluator.epochs:
                evaluator.evaluate_epoch(epoch)
        else:
            at_once = _over_range(evaluator, program, evaluator.epochs)
            deferring = [
                s
                for s in program.strata
                if s.recursive and evaluator.plan.defers & set(s.relations)
            ]
            assert at_once == len(program.strata) - len(deferring), "one pass each"
        deferred = {
            r.name: by_epoch(evaluator, r.name, deferred=True)
            for r in program.catalog
            if r.name in evaluator.plan.defers
        }
        stored[way] = _normal((partitions(tmp / way, program, evaluator), deferred))
    assert stored["ranged"] == stored["stepwise"]
    evaluator.evaluate_epoch(evaluator.epochs[1])
    assert _normal(partitions(tmp / "ranged", program, evaluator)) == stored["stepwise"][0]


@contextmanager
def generated_code(on: bool) -> Iterator[None]:
    """Within this block, Spark compiles its plans when ``on`` (a user's setting, which the
    evaluator leaves as it is), else chooses as it would."""
    if not on:
        yield
        return
    spark = spark_session()
    spark.conf.set("spark.sql.codegen.wholeStage", "true")
    try:
        yield
    finally:
        spark.conf.unset("spark.sql.codegen.wholeStage")


# --------------------------------------------------------------------------- kinds warnings

# Terms of each kind a guard can use in the rule below: its variables (a declared column of
# each type, `@time`, a `where` definition) and constants.
_TERMS = {
    "number": ["x", "n", "at", "d", "1.5", "2", "10ms", "abs(n)", "length(s)"],
    "str": ["s", '"a"', '"2"', "str(n)", "concat(s, s)"],
    "bool": ["b", "true", "false"],
}
_ARITH = ["+", "-", "*", "/", "%"]
_COMPARE = ["==", "!=", "<", "<=", ">", ">="]


@st.composite
def _guards(draw: st.DrawFn) -> tuple[str, bool]:
    """A guard, and whether values of different kinds meet in it (or text in arithmetic)."""

    def term() -> tuple[str, str | None]:  # the text, and its kind (None: undefined)
        kind = draw(st.sampled_from(sorted(_TERMS)))
        one = draw(st.sampled_from(_TERMS[kind]))
        if draw(st.booleans()):
            other_kind = draw(st.sampled_from(sorted(_TERMS)))
            other = draw(st.sampled_from(_TERMS[other_kind]))
            one = f"({one} {draw(st.sampled_from(_ARITH))} {other})"
            kind = "number" if kind == other_kind == "number" else None
        return one, kind

    (left, lk), (right, rk) = term(), term()
    mismatch = lk is None or rk is None or lk != rk
    return f"{left} {draw(st.sampled_from(_COMPARE))} {right}", mismatch


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    drawn=_guards(),
    rows=st.lists(
        st.tuples(
            st.sampled_from(["a", "2", "1.5"]),
            st.sampled_from([1.5, 2.0, -3.0]),
            st.integers(-3, 3),
            st.booleans(),
            st.integers(0, 40),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_a_rule_check_warns_about_derives_nothing(
    tmp_path_factory, drawn: tuple[str, bool], rows
) -> None:
    """`pomo check` warns exactly where values of different kinds meet in a guard whose
    kinds the corpus gives (or text meets arithmetic), and then, whatever the events, the
    reference derives nothing from the rule."""
    guard, mismatch = drawn
    corpus = (
        ".decl r(s: str, x: float, n: int, b: bool) lifetime 1h;\n"
        f"out(s) := r(s, x, n, b) @time(at) if {guard} where d = n * 2;\n"
    )
    program = compile_corpus(corpus, "guard.pomo")
    warned = [w for w in program.warnings if "used only once" not in w.message]
    events = [("r", t, [s, x, n, b]) for s, x, n, b, t in rows]
    case = Case(corpus, events)
    out = outcome(case, tmp_path_factory.mktemp("kinds"), 1000, "reference")
    assert bool(warned) == mismatch, (guard, warned)
    if warned:
        assert out["out"] == [], (guard, warned)
