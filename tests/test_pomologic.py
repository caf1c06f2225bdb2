"""PomoLogic notation: each construct on Spark and on the reference evaluator, with the
tuples worked out by hand; the example corpora's PomoLogic twins against the originals."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from dagster_pomo.engine.lines import ANY_TIME
from dagster_pomo.engine.run import run
from dagster_pomo.examples import DEFAULT_START as START
from dagster_pomo.examples import HOUR
from dagster_pomo.lang import PomoSyntaxError, ast, compile_corpus, load_program, parse
from dagster_pomo.lang.pomologic import to_pomologic
from dagster_pomo.lang.render import render_expr
from tests.conftest import RULES
from tests.test_semantics import ENGINES_RUN, evaluate

TWINS = RULES / "pomologic"


def tuples(out: dict[str, list[dict]], relation: str) -> set[tuple[Any, ...]]:
    return {(*e["args"], e["t"]) for e in out.get(relation, [])}


@pytest.fixture(params=[e for e in ENGINES_RUN if e != "in-process"])
def engine(request: pytest.FixtureRequest) -> str:
    return request.param


def test_projection_keeps_the_named_attributes_and_ignores_the_others(tmp_path, engine):
    corpus = """
    .decl sensor(room: str, kind: str, reading: float).
    rooms(room: R) :- sensor(room: R).
    kinds(room: R, kind: K) :- sensor(room: R, kind: K, reading: _).
    readings(kind: K, value: V) :- sensor(reading: V, kind: K).
    """
    events = [
        ("sensor", 5, ["hall", "temp", 21.5]),
        ("sensor", 6, ["hall", "humidity", 40.0]),
        ("sensor", 9, ["attic", "temp", 30.0]),
    ]
    out = evaluate(tmp_path, corpus, events, 1000, engine, name="case.pomologic")
    assert tuples(out, "rooms") == {("hall", 5), ("hall", 6), ("attic", 9)}
    assert tuples(out, "kinds") == {
        ("hall", "temp", 5),
        ("hall", "humidity", 6),
        ("attic", "temp", 9),
    }
    assert tuples(out, "readings") == {("temp", 21.5, 5), ("humidity", 40.0, 6), ("temp", 30.0, 9)}


def test_a_relation_derived_by_several_rules_and_written_in_any_attribute_order(tmp_path, engine):
    corpus = """
    .decl link(source: str, target: str).
    node(name: N) :- link(source: N).
    node(name: N) :- link(target: N).
    reach(source: S, target: T) :- link(target: T, source: S).
    reach(source: S, target: T) :- reach(source: S, target: M), link(source: M, target: T).
    """
    events = [("link", 1, ["a", "b"]), ("link", 2, ["b", "c"]), ("link", 3, ["x", "a"])]
    out = evaluate(tmp_path, corpus, events, 1000, engine, name="case.pomologic")
    assert tuples(out, "node") == {("a", 1), ("b", 1), ("b", 2), ("c", 2), ("x", 3), ("a", 3)}
    assert tuples(out, "reach") == {
        ("a", "b", 1),
        ("b", "c", 2),
        ("a", "c", 2),
        ("x", "a", 3),
        ("x", "b", 3),
        ("x", "c", 3),
    }


def test_constraints_negation_and_definitions_as_body_predicates(tmp_path, engine):
    corpus = """
    .decl dev(name: str).
    .decl knows(name: str, lang: str).
    .decl avoids(name: str, lang: str).
    pair(lead: A, helper: B, lang: L) :-
        dev(name: A), dev(name: B), A != B,
        knows(name: A, lang: L),
        !avoids(name: B, lang: L).
    effort(name: A, hours: H) :- knows(name: A, lang: L), H = 2 * length(L), H >= 6.
    """
    events = [
        ("dev", 0, ["ana"]),
        ("dev", 0, ["bo"]),
        ("knows", 1, ["ana", "rust"]),
        ("knows", 1, ["bo", "go"]),
        ("knows", 1, ["bo", "c"]),
        ("avoids", 0, ["ana", "go"]),
        ("avoids", 0, ["bo", "c"]),
    ]
    out = evaluate(tmp_path, corpus, events, 1000, engine, name="case.pomologic")
    # ana knows rust (bo does not avoid it); bo knows go (ana avoids it) and c (ana does not).
    assert tuples(out, "pair") == {("ana", "bo", "rust", 1), ("bo", "ana", "c", 1)}
    assert tuples(out, "effort") == {("ana", 8, 1)}  # go and c are too short


def test_a_toggle_carried_by_next_and_flipped_by_presses(tmp_path, engine):
    corpus = """
    .decl install(lamp: str) lifetime 1ms.
    .decl press(lamp: str) lifetime 1ms.
    .decl lamp(lamp: str, on: bool).
    lamp(lamp: L, on: false)@next :- install(lamp: L).
    lamp(lamp: L, on: S)@next :- lamp(lamp: L, on: S), !press(lamp: L).
    lamp(lamp: L, on: true)@next :- lamp(lamp: L, on: false), press(lamp: L).
    lamp(lamp: L, on: false)@next :- lamp(lamp: L, on: true), press(lamp: L).
    """
    # Epochs of 10 ms: installed in [0, 10), pressed in [10, 20) and [30, 40).
    events = [("install", 2, ["hall"]), ("press", 15, ["hall"]), ("press", 33, ["hall"])]
    out = evaluate(tmp_path, corpus, events, 10, engine, until=50, name="case.pomologic")
    assert tuples(out, "lamp") == {
        ("hall", False, 10),
        ("hall", True, 20),
        ("hall", True, 30),
        ("hall", False, 40),  # the last epoch's state would be stamped 50: not produced
    }


def test_the_corpus_notation_names_attributes_too(tmp_path, engine):
    corpus = """
    .decl sensor(room: str, kind: str, reading: float);
    hot(room: r, level: v) := sensor(reading: v, room: r) if v > 25.0;
    """
    events = [("sensor", 5, ["hall", "temp", 21.5]), ("sensor", 9, ["attic", "temp", 30.0])]
    out = evaluate(tmp_path, corpus, events, 1000, engine)
    assert tuples(out, "hot") == {("attic", 30.0, 9)}
    program = compile_corpus(corpus, "case.pomo")
    assert program.catalog["hot"].columns == ("room", "level")  # undeclared: named by use


def test_undeclared_relations_take_their_attribute_names_from_their_uses() -> None:
    program = compile_corpus(
        "big(item: I, size: S) :- thing(name: I, size: S), S > 9.\n"
        "small(item: I) :- thing(size: S, name: I, colour: _), S < 2.\n",
        "case.pomologic",
    )
    assert program.catalog["thing"].columns == ("name", "size", "colour")
    assert program.catalog["big"].columns == ("item", "size")


def test_statements_end_at_a_dot_that_no_letter_or_digit_follows() -> None:
    corpus = parse(
        '.decl p(x: float).\np(x: 1.5). p(x: 2.0e3).\nq(s: "a.b") :- p(x: X), X > 1.\n',
        "case.pomologic",
    )
    assert len(corpus.statements) == 4
    # A `.` inside parentheses is the parser's to report where it stands; one that ends
    # its line ends the statement even so, and the statements after it are still read.
    with pytest.raises(PomoSyntaxError) as raised:
        parse("p(x: 2.).\nq(x: (3).\nr(x: 4) :- ; .\ns(x: 5).\n", "case.pomologic")
    assert [(d.span.line, d.span.column) for d in raised.value.diagnostics] == [
        (1, 7),
        (2, 9),
        (3, 12),
    ]


@pytest.mark.parametrize("twin", sorted(TWINS.glob("*.pomologic")), ids=lambda p: p.stem)
def test_each_example_has_a_pomologic_twin_that_pomo_convert_writes(twin: Path, capsys) -> None:
    """The twins are `pomo convert`'s output for the examples: they say what the examples
    say, in PomoLogic, comments included."""
    from dagster_pomo.cli.main import main

    original = load_program(RULES / f"{twin.stem}.pomo")
    assert main(["convert", str(RULES / f"{twin.stem}.pomo")]) == 0
    assert twin.read_text() == capsys.readouterr().out == to_pomologic(original)
    program = load_program(twin)
    assert program.corpus.decls == original.corpus.decls
    assert [r.columns for r in program.catalog] == [r.columns for r in original.catalog]


def _events_for(program, path: Path, n: int = 400, seed: int = 7) -> None:
    """``n`` events of the program's inputs over three hours, their values drawn from
    small pools (so that joins and negations meet), the same for every run."""
    rng = random.Random(seed)
    pools = {
        "str": ["a", "b", "c", "north", "south"],
        "int": list(range(6)),
        "float": [0.5, 12.0, 47.5, 91.0, 130.0],
        "bool": [True, False],
        "time": [0, HOUR, 2 * HOUR],
    }
    inputs = [r for r in program.catalog.inputs if r.decl is not None]
    lines = []
    for _ in range(n):
        rel = rng.choice(inputs)
        args = [rng.choice(pools[t or "str"]) for t in rel.types]
        lines.append({"relation": rel.name, "t": START + rng.randrange(3 * HOUR), "args": args})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_twins_derive_what_the_examples_derive_on_spark(tmp_path: Path) -> None:
    """Each twin, run on Spark over events for the example's inputs, derives the same
    events as the example itself."""
    twins = sorted(TWINS.glob("*.pomologic"))
    assert {t.stem for t in twins} == {p.stem for p in RULES.glob("*.pomo")}
    for twin in twins:
        original = load_program(RULES / f"{twin.stem}.pomo")
        events = tmp_path / f"{twin.stem}.jsonl"
        _events_for(original, events)
        results = []
        for program in (original, load_program(twin)):
            result = run(
                program, events, HOUR, START, START + 3 * HOUR, engine="auto", window=ANY_TIME
            )
            results.append({n: sorted(map(repr, result.events(n))) for n in result.outputs})
        assert results[0] == results[1], twin.stem
        assert sum(len(v) for v in results[0].values()) > 0, twin.stem


def test_dagster_takes_a_pomologic_corpus_as_it_takes_the_original(tmp_path: Path) -> None:
    from dagster import HourlyPartitionsDefinition

    from dagster_pomo.examples import outbox_handlers
    from dagster_pomo.orchestration import pomo_definitions

    partitions = HourlyPartitionsDefinition(start_date="2023-11-14-22:00")
    keys = []
    for corpus in (RULES / "water_tanks.pomo", TWINS / "water_tanks.pomologic"):
        handlers = outbox_handlers(corpus, tmp_path / "outbox.sqlite")
        defs = pomo_definitions(corpus, partitions, str(tmp_path), str(tmp_path), handlers=handlers)
        keys.append(sorted(k.to_user_string() for a in defs.assets for k in a.keys))
    assert keys[0] == keys[1] and len(keys[0]) == 11


def _digest(text: str) -> str:
    """A content ID worked out from its definition: SHA-256 of the identity's JSON."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@pytest.mark.parametrize("engine", ENGINES_RUN)
@pytest.mark.parametrize("epoch", [1, 1000])
def test_content_ids_bind_join_and_filter_the_same_on_every_engine(tmp_path, engine, epoch):
    corpus = """
    .decl order(customer: str, amount: float).
    .decl big(order: cid, customer: str).
    big(order: C, customer: X) :- C := order(customer: X, amount: A), A > 100.0.
    again(customer: X, amount: A) :- big(order: C, customer: X), C := order(amount: A).
    pairs(first: C, second: D) :-
        C := order(customer: X), D := order(customer: X), C != D, C < D.
    .decl ping().
    pings(id: C) :- C := ping().
    """
    events = [("order", 5, ["ana", 150.0]), ("order", 7, ["bo", 50]), ("order", 9, ["bo", 120.5])]
    events.append(("ping", 7, []))  # a relation with no argument: its time alone
    out = evaluate(tmp_path, corpus, events, epoch, engine, name="case.pomologic")
    ana = _digest('["order",["ana",150.0],5]')
    bo_small = _digest('["order",["bo",50.0],7]')
    bo_big = _digest('["order",["bo",120.5],9]')
    assert tuples(out, "big") == {(ana, "ana", 5), (bo_big, "bo", 9)}
    # A bound content ID filters to that one event: each big order's own amount.
    assert tuples(out, "again") == {("ana", 150.0, 5), ("bo", 120.5, 9)}
    assert tuples(out, "pairs") == {(*sorted([bo_small, bo_big]), 9)}
    assert tuples(out, "pings") == {(_digest('["ping",[],7]'), 7)}


@pytest.mark.parametrize("engine", ENGINES_RUN)
def test_the_specification_s_body_aggregates_run_as_written(tmp_path, engine):
    """`popularProfile`, the valid `totalStock`s and `categoryCount` of the PomoLogic
    specification, word for word (with declarations for their relations)."""
    corpus = """
    .decl profile(id: str).
    .decl follower(name: str, follows: str).
    .decl product(name: str, category: str, quantity: int).
    .decl category(name: str).
    .decl listed(name: str, category: cid).

    popularProfile(id: X) :−
        profile(id: X),
        c := count : follower(follows: X),
        c >= 1000.

    allStock(total: Total) :-
      Total := sum Quantity : product(category: Category, quantity: Quantity).

    totalStock(category: Category, total: Total) :-
      product(category: Category),
      Total := sum Quantity : product(category: Category, quantity: Quantity).

    categoryCount(category: Category, count: Count) :-
        Category := category(),
        Count := count : listed(category: Category).
    """
    events = [("profile", 1, ["ann"]), ("profile", 1, ["bob"])]
    events += [("follower", 10 + i, [f"f{i}", "ann"]) for i in range(1000)]
    events += [("follower", 10 + i, [f"g{i}", "bob"]) for i in range(999)]
    events += [
        ("product", 2000, ["hammer", "tools", 3]),
        ("product", 2001, ["bread", "food", 5]),
        ("product", 2002, ["saw", "tools", 2]),
        ("category", 3000, ["tools"]),
        ("category", 3001, ["food"]),
    ]
    tools, food = _digest('["category",["tools"],3000]'), _digest('["category",["food"],3001]')
    events += [("listed", 3010, ["hammer", tools]), ("listed", 3011, ["saw", tools])]
    out = evaluate(tmp_path, corpus, events, 1000, engine, name="spec.pomologic")
    # The 1000th follower of ann makes her popular; bob never has 1000.
    assert tuples(out, "popularProfile") == {("ann", 1009)}
    # A running total of every product, whatever its category.
    assert tuples(out, "allStock") == {(3, 2000), (8, 2001), (10, 2002)}
    # Per category, at each product's arrival: its category's total then.
    assert tuples(out, "totalStock") == {
        ("tools", 3, 2000),
        ("food", 5, 2001),
        ("tools", 5, 2002),
    }
    # A category counts the listings that name its content ID, from none (0) at its arrival.
    assert tuples(out, "categoryCount") == {
        (tools, 0, 3000),
        (food, 0, 3001),
        (tools, 1, 3010),
        (tools, 2, 3011),
    }


@pytest.mark.parametrize("engine", ENGINES_RUN)
def test_a_body_aggregate_follows_arrivals_and_expiries_while_its_match_lives(tmp_path, engine):
    """Each time an event of the group arrives or expires, the value anew: a version that
    lives until the match or the first event it covers expires. Over no event, a count or
    a sum is 0 and a minimum has no value (no match)."""
    corpus = """
    .decl shop(name: str) lifetime 1000ms.
    .decl sale(shop: str, amount: int) lifetime 100ms.
    summary(shop: S, n: N, total: T) :-
        shop(name: S), N := count : sale(shop: S), T := sum A : sale(shop: S, amount: A).
    smallest(shop: S, least: M) :- shop(name: S), M := min A : sale(shop: S, amount: A).
    largest(most: M) :- M := max A : sale(amount: A).
    """
    events = [
        ("shop", 5, ["north"]),
        ("sale", 10, ["north", 3]),
        ("sale", 40, ["north", 2]),
        ("sale", 130, ["north", 7]),
    ]
    out = evaluate(tmp_path, corpus, events, 100, engine, until=1200, name="shops.pomologic")
    lives = {(*e["args"], e["t"], e["exp"]) for e in out["summary"]}
    assert lives == {
        ("north", 0, 0, 5, 1005),  # no sale yet
        ("north", 1, 3, 10, 110),  # until the first sale expires
        ("north", 2, 5, 40, 110),
        ("north", 1, 2, 110, 140),  # the first sale expired
        ("north", 2, 9, 130, 140),
        ("north", 1, 7, 140, 230),
        ("north", 0, 0, 230, 1005),  # every sale expired: until the shop does
    }
    # Ungrouped, with no positive atom: at each arrival and expiry of a sale (none alive:
    # no maximum, no event).
    assert {(*e["args"], e["t"], e["exp"]) for e in out["largest"]} == {
        (3, 10, 110),
        (3, 40, 110),
        (2, 110, 140),
        (7, 130, 140),
        (7, 140, 230),
    }
    assert {(*e["args"], e["t"]) for e in out["smallest"]} == {
        ("north", 3, 10),
        ("north", 2, 40),
        ("north", 2, 110),
        ("north", 2, 130),
        ("north", 7, 140),
    }


def test_a_content_id_binds_an_atom_of_one_positional_argument() -> None:
    """`C := p(X)` once read as the aggregate function `p` of `(X)` and failed for want of
    a `:`; an aggregate's argument in parentheses reads as before."""
    corpus = parse(
        ".decl p(x: int).\n"
        "r(C, X) :- C := p(X).\n"
        "s(S) :- S := sum (X + 1) : p(X).\n"
        "t(S) :- S := sum(X) : p(X), N := count : p(_), N > 0.\n",
        "case.pomologic",
    )
    cid, total, plain = corpus.rules
    assert cid.body[0].atom.annotation("cid") is not None and cid.body[0].aggregation is None
    assert render_expr(total.body[0].aggregation.arg) == "X + 1"
    assert plain.body[0].aggregation.arg == ast.Var("X")
    with pytest.raises(PomoSyntaxError, match="a body aggregate summarises one value"):
        parse("r(S) :- S := sum(X, Y) : p(X, Y).", "case.pomologic")
