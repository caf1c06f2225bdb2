"""The time semantics of docs/semantics.md (Time) and the seeds' examples, with expected
outputs worked out by hand. Every case runs on every engine and at several epoch sizes, and on Spark
also with small epochs worked out in this process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dagster_pomo.engine.cid import cid
from dagster_pomo.engine.lines import ANY_TIME
from dagster_pomo.engine.run import ENGINES, event_json, run
from dagster_pomo.lang import compile_corpus
from tests.compare import policy
from tests.conftest import GOLDEN

EPOCHS = (1, 7, 10, 1000)


def evaluate(
    tmp_path: Path,
    corpus: str,
    events: list[tuple[str, int, list[Any]]],
    epoch: int,
    engine: str,
    until: int | None = None,
    name: str = "case.pomo",
) -> dict[str, list[dict]]:
    program = compile_corpus(corpus, name)
    path = tmp_path / "events.jsonl"
    path.write_text(
        "".join(json.dumps({"relation": r, "t": t, "args": a}) + "\n" for r, t, a in events)
    )
    # Epoch by epoch, as a schedule runs them: how time is cut into epochs is what the
    # sizes below are there to vary (a range in one pass is checked against this elsewhere).
    # "spark" runs Spark's plans; "in-process" small epochs' strata in this process (the
    # default engine, told every epoch is small); "local" everything in this process.
    how = policy(in_process=engine == "in-process", one_pass=False)
    result = run(
        program,
        path,
        epoch,
        0,
        until,
        engine="auto" if engine == "in-process" else engine,
        window=ANY_TIME,
        policy=how,
    )
    assert not result.ingested.quarantined
    return {
        name: [event_json(program, name, row) for row in result.events(name)]
        for name in result.outputs
    }


def ev(args: list[Any], t: int, exp: int | None = None, **aggs: Any) -> dict[str, Any]:
    return {"args": args, "t": t, "exp": exp, "aggregates": aggs}


# Spark pays a fixed cost per epoch, so it runs the cases at the sizes that cut them into
# a handful of epochs (and one batch); the reference runs every size.
SPARK_EPOCHS = (7, 1000)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine" not in metafunc.fixturenames:
        return
    if "epoch" in metafunc.fixturenames:
        sizes = {"reference": EPOCHS}
        cases = [(e, s) for e in ENGINES_RUN for s in sizes.get(e, SPARK_EPOCHS)]
        metafunc.parametrize(("engine", "epoch"), cases, ids=[f"{e}-{s}ms" for e, s in cases])
    else:
        metafunc.parametrize("engine", [e for e in ENGINES_RUN if e != "in-process"])


# Every engine (`auto` is `spark` or `in-process`, by the epoch's size).
ENGINES_RUN = ("spark", "in-process", "local", "reference")
assert set(ENGINES) == {*ENGINES_RUN, "auto"} - {"in-process"}


def test_pomologic_diagonal(tmp_path, engine, epoch) -> None:
    points = [("point", 0, [x, y]) for x in range(3) for y in range(3)]
    out = evaluate(tmp_path, "diagonal(x, y) := point(x, y) if x <= y;", points, epoch, engine)
    assert out["diagonal"] == [
        ev([x, y], 0) for x, y in [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
    ]


def test_pomologic_meals_with_negation(tmp_path, engine, epoch) -> None:
    corpus = """suggested_meal(a, b, food) :=
        person(a) ^ person(b) ^ likes(a, food) ^ !dislikes(b, food) if a != b;"""
    events = [
        ("person", 0, ["Quinn"]),
        ("person", 0, ["Brooke"]),
        ("likes", 0, ["Quinn", "Ramen"]),
        ("likes", 0, ["Brooke", "Vegan"]),
        ("likes", 0, ["Brooke", "Schnitzel"]),
        ("dislikes", 0, ["Quinn", "Vegan"]),
        ("dislikes", 0, ["Brooke", "Mushrooms"]),
    ]
    out = evaluate(tmp_path, corpus, events, epoch, engine)
    assert out["suggested_meal"] == [
        ev(["Brooke", "Quinn", "Schnitzel"], 0),
        ev(["Quinn", "Brooke", "Ramen"], 0),
    ]


def test_pomologic_total_stock_is_a_running_sum_per_category(tmp_path, engine, epoch) -> None:
    corpus = "total_stock(category) @sum(quantity) := product(name, category, quantity);"
    events = [
        ("product", 0, ["apple", "fruit", 3]),
        ("product", 5, ["pear", "fruit", 4]),
        ("product", 7, ["leek", "veg", 1]),
    ]
    out = evaluate(tmp_path, corpus, events, epoch, engine)
    assert out["total_stock"] == [
        ev(["fruit"], 0, **{"sum(quantity)": 3}),
        ev(["fruit"], 5, **{"sum(quantity)": 7}),
        ev(["veg"], 7, **{"sum(quantity)": 1}),
    ]


def test_negation_is_judged_at_the_match_time(tmp_path, engine, epoch) -> None:
    corpus = ".decl storm(region: str) lifetime 5;\ncalm(n) := reading(n) ^ !storm(_);"
    events = [
        ("reading", 10, [1]),
        ("storm", 20, ["north"]),
        ("reading", 22, [2]),
        ("reading", 30, [3]),
    ]
    out = evaluate(tmp_path, corpus, events, epoch, engine)
    # The storm arrives after reading 1 (no retraction) and is over by reading 3.
    assert out["calm"] == [ev([1], 10), ev([3], 30)]


def test_a_match_needs_every_event_alive_and_expires_with_the_first(
    tmp_path, engine, epoch
) -> None:
    corpus = """.decl a(x: int) lifetime 10;
    .decl b(x: int) lifetime 100;
    c(x) := a(x) ^ b(x);"""
    events = [("a", 0, [1]), ("b", 5, [1]), ("b", 15, [1]), ("b", 3, [2]), ("a", 50, [2])]
    out = evaluate(tmp_path, corpus, events, epoch, engine)
    # b(1)@15 comes after a(1) expired at 10; a(2)@50 finds b(2) (alive until 103).
    assert out["c"] == [ev([1], 5, 10), ev([2], 50, 60)]


def test_lifetimes_turn_aggregates_into_sliding_windows(tmp_path, engine, epoch) -> None:
    corpus = ".decl r(v: float) lifetime 10;\nwindow() @average(v) @count := r(v);"
    events = [("r", 0, [1.0]), ("r", 5, [3.0]), ("r", 12, [5.0])]
    out = evaluate(tmp_path, corpus, events, epoch, engine, until=30)
    assert out["window"] == [
        ev([], 0, 10, **{"average(v)": 1.0, "count": 1}),
        ev([], 5, 10, **{"average(v)": 2.0, "count": 2}),
        ev([], 10, 15, **{"average(v)": 3.0, "count": 1}),  # r@0 has expired
        ev([], 12, 15, **{"average(v)": 4.0, "count": 2}),
        ev([], 15, 22, **{"average(v)": 5.0, "count": 1}),  # r@5 has expired; at 22, none
    ]


def test_sliding_least_and_greatest_of_words_and_of_matches_cut_short(
    tmp_path, engine, epoch
) -> None:
    """Words are compared as words; a match of two events lives only as long as both, so
    some of ``low``'s matches die before the shorter lifetime is up and some do not."""
    corpus = """.decl r(k: str, w: str, v: float) lifetime 10;
    .decl s(k: str) lifetime 4;
    words(k) @min(w) @max(w) := r(k, w, _);
    low(k) @min(v) @max(v) @sum(v) := r(k, _, v) ^ s(k);
    last(k) @max(w) := r(k, w, _) ^ s(k);"""
    events = [
        ("r", 0, ["a", "pear", 2.0]),
        ("r", 3, ["a", "apple", 5.0]),
        ("r", 12, ["a", "fig", 1.0]),
        ("s", 2, ["a"]),
        ("s", 11, ["a"]),
    ]
    out = evaluate(tmp_path, corpus, events, epoch, engine, until=30)
    assert out["words"] == [
        ev(["a"], 0, 10, **{"min(w)": "pear", "max(w)": "pear"}),
        ev(["a"], 3, 10, **{"min(w)": "apple", "max(w)": "pear"}),
        ev(["a"], 10, 13, **{"min(w)": "apple", "max(w)": "apple"}),  # r@0 has expired
        ev(["a"], 12, 13, **{"min(w)": "apple", "max(w)": "fig"}),
        ev(["a"], 13, 22, **{"min(w)": "fig", "max(w)": "fig"}),  # r@3 has expired
    ]
    # At 6 both matches of s@2 have expired: no version until the next match, at 11.
    assert out["low"] == [
        ev(["a"], 2, 6, **{"min(v)": 2.0, "max(v)": 2.0, "sum(v)": 2.0}),
        ev(["a"], 3, 6, **{"min(v)": 2.0, "max(v)": 5.0, "sum(v)": 7.0}),
        ev(["a"], 11, 13, **{"min(v)": 5.0, "max(v)": 5.0, "sum(v)": 5.0}),  # s@2 has expired
        ev(["a"], 12, 13, **{"min(v)": 1.0, "max(v)": 5.0, "sum(v)": 6.0}),
        ev(["a"], 13, 15, **{"min(v)": 1.0, "max(v)": 1.0, "sum(v)": 1.0}),
    ]
    assert out["last"] == [
        ev(["a"], 2, 6, **{"max(w)": "pear"}),
        ev(["a"], 3, 6, **{"max(w)": "pear"}),
        ev(["a"], 11, 13, **{"max(w)": "apple"}),
        ev(["a"], 12, 13, **{"max(w)": "fig"}),
        ev(["a"], 13, 15, **{"max(w)": "fig"}),
    ]


def test_seed_smoothing_with_a_clock(tmp_path, engine, epoch) -> None:
    corpus = """.decl water_level(tank: str, level: float) lifetime 100;
    smoothed(tank) @average(x) @time(tc - period / 2) :=
        water_level(tank, x) @time(te) ^ clock(offset, period) @time(tc)
        if te < tc ^ te >= tc - period
        where offset = 0, period = 10;"""
    events = [
        ("water_level", 1, ["a", 2.0]),
        ("water_level", 4, ["a", 4.0]),
        ("water_level", 12, ["a", 6.0]),
    ]
    out = evaluate(tmp_path, corpus, events, epoch, engine, until=30)
    # Ticks at 10 and 20 each average the minute before; a tick lives one period.
    assert out["smoothed"] == [
        ev(["a"], 5, 20, **{"average(x)": 3.0}),
        ev(["a"], 15, 30, **{"average(x)": 6.0}),
    ]


def test_atoms_joined_only_by_a_band_of_their_times(tmp_path, engine, epoch) -> None:
    """No shared variable: the guards alone pair the atoms (Spark joins them on buckets of
    the band, which must lose nothing at its ends, strict or not)."""
    corpus = """.decl a(k: str) lifetime 1000;
    .decl b(k: str) lifetime 1000;
    near(j, k, ta, tb) := a(j) @time(ta) ^ b(k) @time(tb) if tb - 3 <= ta ^ ta < tb + 2;"""
    events = [
        ("a", 0, ["x"]),
        ("b", 3, ["y"]),  # ta - tb = -3: the closed end
        ("a", 5, ["x"]),  # with b@3: 2, the open end (no match); with b@8: -3
        ("b", 8, ["y"]),
        ("a", 11, ["x"]),  # with b@8: 3 (no match); with b@12: -1
        ("b", 12, ["y"]),
        ("b", 40, ["z"]),
    ]
    out = evaluate(tmp_path, corpus, events, epoch, engine, until=60)
    assert out["near"] == [
        ev(["x", "y", 0, 3], 3, 1000),
        ev(["x", "y", 5, 8], 8, 1005),
        ev(["x", "y", 11, 12], 12, 1011),
    ]


def test_recursion_reaches_a_fixpoint_at_each_time(tmp_path, engine, epoch) -> None:
    corpus = "reach(x, y) := edge(x, y);\nreach(x, z) := reach(x, y) ^ edge(y, z);"
    events = [("edge", 0, [1, 2]), ("edge", 5, [2, 3]), ("edge", 7, [3, 4])]
    out = evaluate(tmp_path, corpus, events, epoch, engine)
    assert out["reach"] == [
        ev([1, 2], 0),
        ev([1, 3], 5),
        ev([2, 3], 5),
        ev([1, 4], 7),
        ev([2, 4], 7),
        ev([3, 4], 7),
    ]


def test_explicit_future_time_and_negation_make_timeouts(tmp_path, engine, epoch) -> None:
    corpus = """timeout(id) @time(t + 30) := order(id) @time(t);
    late(id) := timeout(id) ^ !shipped(id);"""
    events = [("order", 0, ["a"]), ("order", 5, ["b"]), ("shipped", 20, ["a"])]
    out = evaluate(tmp_path, corpus, events, epoch, engine, until=50)
    assert out["timeout"] == [ev(["a"], 30), ev(["b"], 35)]
    assert out["late"] == [ev(["b"], 35)]


def test_an_aggregate_stamped_after_its_matches_is_one_version_then(
    tmp_path, engine, epoch
) -> None:
    """Readings summed per bucket of four times, stamped at the bucket's end: every match
    made before that time is known at it, so the rule that reads the sum sees one version
    then, over all of them, and not the partial sums on the way (a minute's average
    stamped at the middle of the minute and compared with a threshold, say)."""
    corpus = """.decl r(v: int) lifetime 100;
    per4() @sum(v) @time(t - t % 4 + 3) := r(v) @time(t);
    high(s) := per4() @sum(s) if s > 5;"""
    events = [("r", 0, [10]), ("r", 1, [20]), ("r", 2, [30]), ("r", 5, [40])]
    out = evaluate(tmp_path, corpus, events, epoch, engine, until=50)
    assert out["high"] == [ev([60], 3, 100), ev([40], 7, 105)]


def test_versions_of_one_event_merge_to_the_longest_life(tmp_path, engine, epoch) -> None:
    corpus = ".decl a(x: int) lifetime 10;\nseen(x) @time(0) := a(x);"
    events = [("a", 0, [1]), ("a", 5, [1]), ("a", 30, [1])]
    out = evaluate(tmp_path, corpus, events, epoch, engine)
    assert out["seen"] == [ev([1], 0, 40)]


def test_an_aggregate_counts_an_event_once_whatever_its_versions(tmp_path, engine, epoch) -> None:
    corpus = """.decl a(x: int) lifetime 10;
    .decl b(x: int) lifetime 3;
    seen(x) @time(0) := a(x);
    seen(x) @time(0) := b(x);
    n() @count @sum(x) := seen(x);"""
    # seen(1)@0 has a version alive on [2, 5) (from b) and one on [4, 14) (from a).
    events = [("b", 2, [1]), ("a", 4, [1]), ("a", 5, [2])]
    out = evaluate(tmp_path, corpus, events, epoch, engine, until=30)
    assert out["n"] == [
        ev([], 2, 5, **{"count": 1, "sum(x)": 1}),  # the version from a is not made yet
        ev([], 4, 14, **{"count": 1, "sum(x)": 1}),  # both versions alive: one event
        ev([], 5, 14, **{"count": 2, "sum(x)": 3}),
        ev([], 14, 15, **{"count": 1, "sum(x)": 2}),  # seen(1) has expired
    ]


def test_a_sliding_aggregate_changes_when_a_match_expires(tmp_path, engine, epoch) -> None:
    """Sales at 0 and 5 living 10: between 10 and 15 one is still alive, and the window
    says so (a version at each expiry, not only at each arrival); after 15 none is, and
    the group has no version. Numbers (a sweep), text and sets (Spark's range window) alike;
    an explicit `@time` keeps one version per match time."""
    corpus = """.decl sale(a: str, n: int, who: str) lifetime 10;
    stats(a) @count @sum(n) := sale(a, n, _);
    names(a) @min(who) @collect(who) := sale(a, _, who);
    at(a) @time(0) @count := sale(a, _, _);
    seen(a, c) := stats(a) @count(c);"""
    events = [("sale", 0, ["x", 1, "bo"]), ("sale", 5, ["x", 2, "al"]), ("sale", 30, ["y", 1, "z"])]
    out = evaluate(tmp_path, corpus, events, epoch, engine, until=45)
    assert out["stats"] == [
        ev(["x"], 0, 10, **{"count": 1, "sum(n)": 1}),
        ev(["x"], 5, 10, **{"count": 2, "sum(n)": 3}),
        ev(["x"], 10, 15, **{"count": 1, "sum(n)": 2}),  # the sale at 0 has expired
        ev(["y"], 30, 40, **{"count": 1, "sum(n)": 1}),
    ]
    assert out["names"] == [
        ev(["x"], 0, 10, **{"min(who)": "bo", "collect(who)": ["bo"]}),
        ev(["x"], 5, 10, **{"min(who)": "al", "collect(who)": ["al", "bo"]}),
        ev(["x"], 10, 15, **{"min(who)": "al", "collect(who)": ["al"]}),
        ev(["y"], 30, 40, **{"min(who)": "z", "collect(who)": ["z"]}),
    ]
    assert out["seen"] == [
        ev(["x", 1], 0, 10),
        ev(["x", 2], 5, 10),
        ev(["x", 1], 10, 15),
        ev(["y", 1], 30, 40),
    ]
    # With `@time(0)`, the versions of the one event at time 0 (its latest shown): no more.
    assert out["at"] == [ev(["x"], 0, 10, count=2), ev(["y"], 0, 40, count=1)]


def test_text_that_differs_after_a_nul_character_is_other_text(tmp_path, engine, epoch) -> None:
    """Keys compare whole: "a" and "a\\x00" are two tanks in every join, negation, group and
    merge of versions (C strings would end both at the NUL and make them one)."""
    corpus = """.decl r(k: str, x: int) lifetime 100;
    .decl s(k: str) lifetime 100;
    cnt(k) @count := r(k, x);
    pair(k, x) := r(k, x) ^ r(k, y) if x < y;
    free(k, x) := r(k, x) ^ !s(k);
    both(k) @sum(x) := r(k, x) ^ s(k);
    seen(k) := r(k, _);
    seen(k) := s(k);"""
    nul = "a\x00"
    events = [("s", 5, [nul]), ("r", 10, ["a", 1]), ("r", 10, [nul, 2]), ("r", 20, [nul, 3])]
    # Until 60: before any of them expires (a window's expiries are tested elsewhere).
    out = evaluate(tmp_path, corpus, [*events, ("r", 30, ["a", 3])], epoch, engine, until=60)
    assert out["pair"] == [ev([nul, 2], 20, 110), ev(["a", 1], 30, 110)]
    assert out["free"] == [ev(["a", 1], 10, 110), ev(["a", 3], 30, 130)]
    assert out["both"] == [ev([nul], 10, 105, **{"sum(x)": 2}), ev([nul], 20, 105, **{"sum(x)": 5})]
    assert out["cnt"] == [
        ev(["a"], 10, 110, count=1),
        ev([nul], 10, 110, count=1),
        ev([nul], 20, 110, count=2),
        ev(["a"], 30, 110, count=2),
    ]
    seen = [([nul], 5), (["a"], 10), ([nul], 10), ([nul], 20), (["a"], 30)]
    assert out["seen"] == [ev(k, t, t + 100) for k, t in seen]


def test_dedalus_counter_with_next(tmp_path, engine) -> None:
    corpus = """.decl seq(a: str, x: int) lifetime 10;
    .decl event(a: str) lifetime 1;
    seq("c", 0);
    seq(a, x + 1) @next := seq(a, x) ^ event(a);
    seq(a, x) @next := seq(a, x) ^ !event(a);"""
    events = [("event", 3, ["c"]), ("event", 25, ["c"])]
    out = evaluate(tmp_path, corpus, events, 10, engine, until=40)
    assert out["seq"] == [
        ev(["c", 0], 0, 10),
        ev(["c", 1], 10, 20),
        ev(["c", 1], 20, 30),
        ev(["c", 2], 30, 40),
    ]


def test_next_depends_on_the_epoch_size(tmp_path, engine) -> None:
    corpus = ".decl ping(n: int) lifetime 1;\nseen(n) @next := ping(n);"
    events = [("ping", 3, [1])]
    assert evaluate(tmp_path, corpus, events, 10, engine, until=40)["seen"] == [ev([1], 10, 20)]
    assert evaluate(tmp_path, corpus, events, 5, engine, until=40)["seen"] == [ev([1], 5, 10)]


def test_facts_do_not_drag_the_run_back_to_1970(tmp_path, engine) -> None:
    corpus = """.decl capacity(tank: str, max: float);
    capacity("north", 100.0);
    known(tank) := capacity(tank, _);
    high(tank, level) := level(tank, level) ^ capacity(tank, max) if level > 0.9 * max;"""
    program = compile_corpus(corpus, "case.pomo")
    path = tmp_path / "events.jsonl"
    hour, t0 = 3_600_000, 1_700_000_000_000
    path.write_text(json.dumps({"relation": "level", "t": t0, "args": ["north", 95.0]}) + "\n")
    result = run(program, path, hour, engine=engine)
    # The plan starts at the first landed event; the first epoch also takes what came before.
    assert len(result.epoch_range.epochs) == 1 and result.epoch_range.start == t0 // hour * hour
    assert [(r.args, r.t) for r in result.events("known")] == [(("north",), 0)]
    assert [(r.args, r.t) for r in result.events("high")] == [(("north", 95.0), t0)]


def test_rules_check_warns_about_match_nothing_on_any_engine(tmp_path, engine) -> None:
    """Values of different kinds never compare and text has no arithmetic: the rules that
    `pomo check` warns about (tests/golden/warnings) derive nothing, on each engine, from
    events that would satisfy them if "30" were a number or `open` were 1."""
    corpus = (Path(__file__).parent / "golden" / "warnings" / "kinds.pomo").read_text()
    program = compile_corpus(corpus, "kinds.pomo")
    # One warning for each of the rules on lines 6 to 9, none for `fine` on line 10.
    assert sorted(w.span.line for w in program.warnings) == [6, 7, 8, 9]
    events = [
        ("reading", 10, ["a", 31.0]),
        ("valve", 10, ["a", True]),
        ("label", 10, ["a", "31.0"]),
    ]
    out = evaluate(tmp_path, corpus, events, 1000, engine)
    assert out["quoted"] == out["opened"] == out["named"] == out["late"] == []
    assert out["fine"] == [ev(["a", "31.0"], 10, 300_010)]


def test_an_undefined_constant_definition_matches_nothing(tmp_path, engine, epoch) -> None:
    """`where b = 1 / 0` depends on no event and is undefined: the rule matches nothing (as
    an undefined value of any match drops it), on every engine; nothing crashes."""
    corpus = """r(x, b) := a(x) where b = 1 / 0;
    s(x, d) := a(x) where c = 2 * 3, d = c % 0;
    u(x, c) := a(x) where c = 2 * 3;
    q(x) := a(x) ^ !r(x, _);"""
    out = evaluate(tmp_path, corpus, [("a", 0, [1]), ("a", 4, [2])], epoch, engine)
    assert out["r"] == [] and out["s"] == []
    assert out["u"] == [ev([1, 6], 0), ev([2, 6], 4)]
    assert out["q"] == [ev([1], 0), ev([2], 4)]


def test_arithmetic_beyond_64_bits_is_undefined(tmp_path, engine, epoch) -> None:
    """An integer result beyond 64 bits, or a float one beyond the largest double, is
    undefined: the match that needs it does not happen, on every engine (the JVM would wrap
    the integer around, Python would not)."""
    corpus = """.decl n(x: int, f: float);
    big(x, y) := n(x, f) where y = x * 4611686018427387904;
    sum(x, y) := n(x, f) where y = x + 9223372036854775000;
    far(x, g) := n(x, f) where g = f * f;
    quotient(x, g) := n(x, f) where g = f / 1e-300;"""
    events = [("n", 0, [1, 1.0]), ("n", 3, [2, 1e200]), ("n", 5, [-3, -2.0])]
    out = evaluate(tmp_path, corpus, events, epoch, engine)
    assert out["big"] == [ev([1, 4611686018427387904], 0)]  # 2 and -3 leave 64 bits
    assert out["sum"] == [
        ev([1, 9223372036854775001], 0),
        ev([2, 9223372036854775002], 3),
        ev([-3, 9223372036854774997], 5),
    ]
    assert out["far"] == [ev([1, 1.0], 0), ev([-3, 4.0], 5)]
    assert out["quotient"] == [ev([1, 1.0 / 1e-300], 0), ev([-3, -2.0 / 1e-300], 5)]


def test_a_float_s_integer_beyond_64_bits_is_undefined(tmp_path, engine, epoch) -> None:
    """`floor`, `ceil`, `round` and `int` of a float whose integer leaves 64 bits are
    undefined on every engine (the JVM would saturate it at the largest long, Python would
    not): every float in [-2**63, 2**63) has one, the others none."""
    corpus = """.decl n(x: int, f: float);
    down(x, y) := n(x, f) where y = floor(f);
    up(x, y) := n(x, f) where y = ceil(f);
    near(x, y) := n(x, f) where y = round(f);
    cut(x, y) := n(x, f) where y = int(f);"""
    least, below = -(2.0**63), 2.0**63 - 1024  # the ends in range: -2**63, the last float
    events = [
        ("n", 0, [1, -3.5]),
        ("n", 3, [2, 1e20]),
        ("n", 4, [3, -1e20]),
        ("n", 5, [4, least]),
        ("n", 6, [5, 2.0**63]),
        ("n", 7, [6, below]),
    ]
    out = evaluate(tmp_path, corpus, events, epoch, engine)
    ends = [ev([4, -(2**63)], 5), ev([6, 2**63 - 1024], 7)]
    assert out["down"] == [ev([1, -4], 0), *ends]
    assert out["up"] == [ev([1, -3], 0), *ends]
    assert out["near"] == [ev([1, -4], 0), *ends]
    assert out["cut"] == [ev([1, -3], 0), *ends]


def test_the_least_integer_has_no_negation_and_no_absolute_value(tmp_path, engine, epoch) -> None:
    """-2**63 is the one integer whose negation (2**63) leaves 64 bits: `-x` and `abs(x)`
    of it are undefined on every engine (the JVM and numpy would give it back unchanged,
    Python 2**63); of the others, and of floats, they are as written."""
    corpus = """.decl n(x: int, f: float);
    neg(x, y) := n(x, f) where y = -x;
    pos(x, y) := n(x, f) where y = abs(x);
    fneg(x, g) := n(x, f) where g = -f;
    fpos(x, g) := n(x, f) where g = abs(f);"""
    least = -(2**63)
    events = [("n", 0, [-3, -2.5]), ("n", 2, [least, float(least)]), ("n", 4, [least + 1, 1.0])]
    out = evaluate(tmp_path, corpus, events, epoch, engine)
    assert out["neg"] == [ev([-3, 3], 0), ev([least + 1, 2**63 - 1], 4)]
    assert out["pos"] == [ev([-3, 3], 0), ev([least + 1, 2**63 - 1], 4)]
    assert out["fneg"] == [ev([-3, 2.5], 0), ev([least, 2.0**63], 2), ev([least + 1, -1.0], 4)]
    assert out["fpos"] == [ev([-3, 2.5], 0), ev([least, 2.0**63], 2), ev([least + 1, 1.0], 4)]


def test_async_delivers_each_match_at_the_next_epoch(tmp_path, engine) -> None:
    """A message per match of an epoch (negation as of its time), delivered at the next
    epoch's start and living its lifetime; `@next` beside it carries state one epoch."""
    corpus = """
    .decl alarm(x: str) lifetime 5;
    .decl muted(x: str) lifetime 3;
    .decl page(x: str) lifetime 100;
    page(x) @async := alarm(x) ^ !muted(x);
    seen(x) @next := alarm(x);
    paged(x) := page(x);
    """
    events = [
        ("alarm", 3, ["a"]),
        ("muted", 4, ["b"]),
        ("alarm", 5, ["b"]),  # muted then: no message
        ("alarm", 12, ["b"]),
        ("alarm", 13, ["c"]),
    ]
    out = evaluate(tmp_path, corpus, events, 10, engine, until=60)
    assert out["page"] == [ev(["a"], 10, 110), ev(["b"], 20, 120), ev(["c"], 20, 120)]
    assert out["paged"] == out["page"]  # read by deductive rules from its delivery on
    # State, not messages: every alarm alive in the epoch, for one epoch.
    assert out["seen"] == [ev(["a"], 10, 20), ev(["b"], 10, 20), ev(["b"], 20, 30),
                           ev(["c"], 20, 30)]  # fmt: skip


# Balance updates sent to the seed's queue: two users, bob's three in sequence order.
QUEUED_REQUESTS = [
    ("request", 1, ["bob", 100.0, 2355]),
    ("request", 2, ["bob", 75.0, 2358]),
    ("request", 3, ["alice", 0.0, 2377]),
    ("request", 4, ["bob", 10.0, 2455]),
]


def test_a_queue_fed_by_async_applies_one_update_per_user_and_epoch(tmp_path, engine) -> None:
    """The seed's balance updates: requests delivered by `@async`, queued by `@next` until
    applied, one per user and epoch in sequence order (golden plan `async`)."""
    corpus = (GOLDEN / "plans" / "async.pomo").read_text()
    out = evaluate(tmp_path, corpus, QUEUED_REQUESTS, 10, engine, until=60)
    assert [(e["args"], e["t"]) for e in out["balance_update"]] == [
        (["alice", 0.0], 10),
        (["bob", 100.0], 10),
        (["bob", 75.0], 20),
        (["bob", 10.0], 30),
    ]
    assert [e["t"] for e in out["queued"]] == [10, 10, 10, 10, 20, 20, 30]


def test_the_seed_s_queue_rule_runs_as_written(tmp_path, engine) -> None:
    """Seed 002's queue with its own inductive rule, ``p(A, B, C)@next <- m(A, B, C),
    omin(A, C)``: it matches only state, yet takes its head from it, so it is accepted
    (no warning) and applies one update per user and epoch, stamped at the next epoch."""
    corpus = (
        (GOLDEN / "plans" / "async.pomo")
        .read_text()
        .replace(
            "balance_update(user, amount) := queued(user, amount, seq) ^",
            "balance_update(user, amount, seq) @next := queued(user, amount, seq) ^",
        )
    )
    assert "@next := queued" in corpus
    assert not compile_corpus(corpus, "queue.pomo").warnings
    out = evaluate(tmp_path, corpus, QUEUED_REQUESTS, 10, engine, until=60)
    assert [(e["args"], e["t"]) for e in out["balance_update"]] == [
        (["alice", 0.0, 2377], 20),
        (["bob", 100.0, 2355], 20),
        (["bob", 75.0, 2358], 30),
        (["bob", 10.0, 2455], 40),
    ]


def test_floats_as_text_and_text_as_numbers_read_as_the_language_reads_them(
    tmp_path, engine
) -> None:
    """`str` of a float is its shortest text as Python writes it (1e+20, not the JVM's
    1.0E20), `int` and `float` of text read it as Python does (" 12 " is 12, "1_000" is
    1000, "1e3" is no integer but the float 1000.0; an integer past 64 bits is none): the
    same on every engine."""
    corpus = """.decl r(x: float, s: str);
    shown(t) := r(x, _) where t = str(x);
    joined(t) := r(x, s) where t = concat(s, x);
    whole(n) := r(_, s) where n = int(s);
    real(y) := r(_, s) where y = float(s);"""
    events = [
        ("r", 1, [1e20, " 12 "]),
        ("r", 2, [1.5e-7, "1_000"]),
        ("r", 3, [12345678.9, "1e3"]),
        ("r", 4, [0.5, "x"]),
        ("r", 5, [2.0, "99999999999999999999"]),
    ]
    out = evaluate(tmp_path, corpus, events, 1000, engine)
    assert [e["args"] for e in out["shown"]] == [
        ["1e+20"],
        ["1.5e-07"],
        ["12345678.9"],
        ["0.5"],
        ["2.0"],
    ]
    assert [e["args"] for e in out["joined"]] == [
        [" 12 1e+20"],
        ["1_0001.5e-07"],
        ["1e312345678.9"],
        ["x0.5"],
        ["999999999999999999992.0"],
    ]
    assert [(e["args"], e["t"]) for e in out["whole"]] == [([12], 1), ([1000], 2)]
    assert [(e["args"], e["t"]) for e in out["real"]] == [
        ([12.0], 1),
        ([1000.0], 2),
        ([1000.0], 3),
        ([1e20], 5),
    ]


def test_choose_is_a_dependency_across_time(tmp_path, engine, epoch) -> None:
    """`choose((order), (name))`: per order, the courier of its first match (the least name
    among the matches at the earliest time), and from then on only matches with that
    courier (Greco and Zaniolo's functional dependency, seed 002): a courier arriving
    later, in the same epoch or a later one, makes no second assignment. A rule that wants
    a choice per instant puts the time in the keys."""
    corpus = (GOLDEN / "plans" / "choose.pomo").read_text() + (
        "per_arrival(order, name) := order(order, zone) ^ courier(name, zone) @time(at)"
        " ^ choose((order, at), (name));\n"
    )
    events = [
        ("courier", 1, ["bea", 1]),
        ("courier", 2, ["al", 1]),
        ("courier", 3, ["cy", 2]),
        ("order", 5, ["o1", 1]),  # al and bea both match: al
        ("order", 6, ["o2", 2]),
        ("courier", 7, ["aa", 1]),  # o1 is still open, but has al: no match kept
        ("courier", 8, ["zed", 2]),  # nor for o2, which has cy
        ("order", 9, ["o3", 1]),  # a new order: aa, al and bea match, aa is least
        ("order", 12, ["o1", 1]),  # o1 again: al still matches, and is o1's courier
    ]
    out = evaluate(tmp_path, corpus, events, epoch, engine, until=40)
    assert [(e["args"], e["t"]) for e in out["assigned"]] == [
        (["o1", "al"], 5),
        (["o2", "cy"], 6),
        (["o3", "aa"], 9),
        (["o1", "al"], 12),
    ]
    # Per (order, arrival of the courier): each arrival time chooses anew.
    assert [(e["args"], e["t"]) for e in out["per_arrival"]] == [
        (["o1", "al"], 5),
        (["o1", "bea"], 5),
        (["o2", "cy"], 6),
        (["o1", "aa"], 7),
        (["o2", "zed"], 8),
        (["o3", "aa"], 9),
        (["o3", "al"], 9),
        (["o3", "bea"], 9),
        (["o1", "aa"], 12),
        (["o1", "al"], 12),
        (["o1", "bea"], 12),
    ]


def test_provenance_is_every_input_event_a_derived_event_rests_on(tmp_path, engine, epoch) -> None:
    """`@provenance`: the content IDs of the input events (and facts) under every derivation
    of an event, united over its versions; recursion reaches them through the rounds,
    an aggregate through the matches it covers; a negated atom is no source."""
    corpus = """
    .decl edge(a: int, b: int);
    .decl reading(tank: str, level: float) lifetime 10;
    .decl muted(tank: str);
    reach(0, 1);
    reach(x, y) := edge(x, y);
    reach(x, z) @provenance := reach(x, y) ^ edge(y, z);
    peak(tank) @max(level) @provenance := reading(tank, level) ^ !muted(tank);
    plain(x) := edge(x, _);
    """
    events = [
        ("edge", 1, [1, 2]),
        ("edge", 1, [2, 3]),
        ("edge", 1, [1, 3]),
        ("muted", 2, ["t9"]),
        ("reading", 2, ["t1", 7.0]),
        ("reading", 4, ["t1", 8.0]),
        ("reading", 5, ["t9", 9.0]),
    ]
    out = evaluate(tmp_path, corpus, events, epoch, engine, until=30)

    def e(args: list[Any], t: int) -> str:
        return cid("edge", args, t)

    fact = cid("reach", [0, 1], 0)
    r1, r2 = cid("reading", ["t1", 7.0], 2), cid("reading", ["t1", 8.0], 4)
    assert [(x["args"], x["t"], x["provenance"]) for x in out["reach"]] == [
        ([0, 1], 0, [fact]),
        ([0, 2], 1, sorted([fact, e([1, 2], 1)])),
        ([0, 3], 1, sorted([fact, e([1, 2], 1), e([2, 3], 1), e([1, 3], 1)])),
        ([1, 2], 1, [e([1, 2], 1)]),
        ([1, 3], 1, sorted([e([1, 3], 1), e([1, 2], 1), e([2, 3], 1)])),  # both routes
        ([2, 3], 1, [e([2, 3], 1)]),
    ]
    assert out["peak"] == [
        {**ev(["t1"], 2, 12, **{"max(level)": 7.0}), "provenance": [r1]},
        {**ev(["t1"], 4, 12, **{"max(level)": 8.0}), "provenance": sorted([r1, r2])},
        {**ev(["t1"], 12, 14, **{"max(level)": 8.0}), "provenance": [r2]},  # r1 has expired
    ]
    assert all("provenance" not in x for x in out["plain"])  # asked by no carrier


def test_collect_and_a_registered_lattice_merge_the_matches_alive(tmp_path, engine, epoch) -> None:
    """`@collect` (a sorted set) and `@lattice` (a registered merge: bitwise or, the longest
    text) over the matches alive at each time, beside each other and `@provenance`; a
    lattice's value read back in a body."""
    corpus = """
    .decl perm(user: str, bits: int, note: str) lifetime 10;
    rights(user) @lattice("flags", bits) := perm(user, bits, _);
    notes(user) @lattice("longest", note) @collect(bits) @provenance := perm(user, bits, note);
    strong(user) := rights(user) @lattice(b) if b >= 6;
    """
    events = [
        ("perm", 1, ["ann", 1, "a"]),
        ("perm", 3, ["ann", 4, "bb"]),
        ("perm", 5, ["ann", 2, "ab"]),
        ("perm", 6, ["bob", 8, "zzz"]),
        ("perm", 14, ["ann", 1, "c"]),  # the first three have expired by then
    ]
    out = evaluate(tmp_path, corpus, events, epoch, engine, until=30)
    flags = [
        (e["args"][0], e["t"], e["exp"], e["aggregates"]["flags(bits)"]) for e in out["rights"]
    ]
    # Each expiry is a change too: at 11, 13 and 15 ann's first three lapse one by one.
    assert flags == [("ann", 1, 11, 1), ("ann", 3, 11, 5), ("ann", 5, 11, 7), ("bob", 6, 16, 8),
                     ("ann", 11, 13, 6), ("ann", 13, 15, 2), ("ann", 14, 15, 3),
                     ("ann", 15, 24, 1)]  # fmt: skip
    notes = [
        (e["t"], e["aggregates"]["longest(note)"], e["aggregates"]["collect(bits)"])
        for e in out["notes"]
    ]
    assert notes == [(1, "a", [1]), (3, "bb", [1, 4]), (5, "bb", [1, 2, 4]), (6, "zzz", [8]),
                     (11, "bb", [2, 4]), (13, "ab", [2]), (14, "ab", [1, 2]),
                     (15, "c", [1])]  # fmt: skip
    both = cid("perm", ["ann", 2, "ab"], 5), cid("perm", ["ann", 1, "c"], 14)
    assert out["notes"][-2]["provenance"] == sorted(both)
    assert out["notes"][-1]["provenance"] == [both[1]]  # the match alive at 15, alone
    strong = [(e["args"], e["t"]) for e in out["strong"]]
    assert strong == [(["ann"], 5), (["bob"], 6), (["ann"], 11)]  # 4 | 2 after 11
