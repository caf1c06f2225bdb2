"""`pomo explain`: every derived event explains down to input events, facts and clock
ticks, each input event with the landing file and line that holds it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dagster_pomo.engine.explain import Derivation, explain_run
from dagster_pomo.engine.lines import ANY_TIME, DEFAULT_TIMES, decode
from dagster_pomo.engine.run import run
from dagster_pomo.examples import water_tank_events
from dagster_pomo.lang import compile_corpus, load_program
from dagster_pomo.timeline import NEVER
from tests.conftest import ROOT, RULES

POMO = Path(sys.executable).with_name("pomo")
HOUR = 3_600_000


@pytest.fixture(scope="module")
def tanks(tmp_path_factory: pytest.TempPathFactory):
    """The demo's data (its readings over three hours) evaluated on Spark."""
    landing = tmp_path_factory.mktemp("tanks") / "readings.jsonl"
    water_tank_events(landing, 9000, tanks=3, hours=3)
    program = load_program(RULES / "water_tanks.pomo")
    return landing, run(program, landing, HOUR)


def _leaves_are_grounded(d: Derivation, landing: Path, lines: list[str]) -> int:
    """Every leaf under ``d`` is an input event found at its line, a fact or a clock tick;
    returns how many input events it rests on."""
    inputs = 0
    for node in d.walk():
        assert node.how in ("rule", "input", "fact", "clock"), (node.how, node.source)
        if node.how == "rule":
            assert node.premises and node.rule and node.text
        if node.how == "input":
            file, line = node.source.rsplit(":", 1)
            assert Path(file) == landing
            event = decode(lines[int(line) - 1])
            args = event["args"]
            values = list(args.values()) if isinstance(args, dict) else args
            assert (event["relation"], values, event["t"]) == (
                node.relation,
                list(node.args),
                node.t,
            )
            inputs += 1
    return inputs


def test_every_overflow_alert_explains_down_to_its_readings(tanks) -> None:
    landing, result = tanks
    alerts = result.events("overflow_alert")
    assert alerts, "the demo's data raises alerts"
    found = explain_run(result, "overflow_alert(_)", None, landing, DEFAULT_TIMES)
    assert [(d.args, d.t) for d in found] == [(a.args, a.t) for a in alerts]
    lines = landing.read_text().splitlines()
    for alert in found:
        assert alert.rule == "water_tanks.pomo:54"
        # No high minute in the five before, not under maintenance: the negated atoms held.
        tank = alert.args[0]
        assert alert.absent == [f'was_high("{tank}")', f'maintenance("{tank}", _)']
        (high,) = alert.premises
        assert high.relation == "high_minute" and high.args[0] == tank and high.t == alert.t
        minute, capacity = high.premises
        assert (minute.relation, capacity.how) == ("level_per_minute", "fact")
        assert high.args[1] > 0.9 * capacity.args[1]
        # The minute's average rests on the readings of its tank in that minute.
        readings = minute.premises
        assert readings and {r.args[0] for r in readings} == {tank}
        assert all(alert.t - 30_000 <= r.t < alert.t + 30_000 for r in readings)
        mean = sum(r.args[1] for r in readings) / len(readings)
        assert mean == pytest.approx(minute.aggregates[0]) == pytest.approx(high.args[1])
        assert _leaves_are_grounded(alert, landing, lines) == len(readings)


def test_the_json_form_round_trips_and_the_cli_prints_it(tanks, tmp_path: Path) -> None:
    landing, result = tanks
    (first, *_) = explain_run(result, 'overflow_alert("north")', None, landing, DEFAULT_TIMES)
    assert Derivation.from_json(json.loads(json.dumps(first.to_json()))) == first
    done = subprocess.run(
        [str(POMO), "explain", str(RULES / "water_tanks.pomo"), "--events", str(landing)]
        + ["--at", str(first.t), "--json", 'overflow_alert(tank: "north")'],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (printed,) = json.loads(done.stdout)
    assert Derivation.from_json(printed) == Derivation.from_json(first.to_json())
    text = "\n".join(first.render())
    assert "by rule water_tanks.pomo:54" in text
    assert 'no maintenance("north", _) alive then' in text
    assert f"input, {landing}:" in text
    # A ten-minute average rests on more readings than a page shows.
    (near, *_) = explain_run(result, 'near_capacity("north", _, _)', None, landing, DEFAULT_TIMES)
    assert "(--json lists all)" in "\n".join(near.render())


@pytest.mark.parametrize("engine", ["auto", "local", "reference"])
def test_recursion_next_body_aggregates_and_clocks_explain(tmp_path: Path, engine: str) -> None:
    """A path through a cycle explains without resting on itself; an `@next` streak on the
    epoch before it; a body aggregate on the events it counted; a clock tick as such."""
    corpus = """
    .decl edge(a: str, b: str);
    path(a, b) := edge(a, b);
    path(a, c) := path(a, b) ^ edge(b, c);
    .decl ping(who: str) lifetime 5;
    seen(who) @next := ping(who);
    seen(who) @next := seen(who) ^ !ping(who);
    busy(who, n) := ping(who) ^ n = count : ping(_) if n > 1;
    ticks(t) := clock(0, 10) @time(t) ^ ping(_);
    """
    program = compile_corpus(corpus, "cases.pomo")
    events = [
        ("edge", 1, ["a", "b"]),
        ("edge", 2, ["b", "a"]),
        ("edge", 3, ["b", "c"]),
        ("ping", 11, ["ann"]),
        ("ping", 12, ["bob"]),
    ]
    landing = tmp_path / "events.jsonl"
    landing.write_text(
        "".join(json.dumps({"relation": r, "t": t, "args": a}) + "\n" for r, t, a in events)
    )
    result = run(program, landing, 10, 0, 40, engine=engine, window=ANY_TIME)
    lines = landing.read_text().splitlines()
    (ac,) = explain_run(result, 'path("a", "c")', None, landing, ANY_TIME)
    assert [p.relation for p in ac.premises] == ["path", "edge"]
    assert _leaves_are_grounded(ac, landing, lines) == 2  # edge a->b, then b->c
    later = explain_run(result, 'seen("ann")', 30, landing, ANY_TIME)
    assert [d.rule for d in later] == ["cases.pomo:7"]  # carried over, not pinged again
    assert later[0].absent == ['ping("ann")']
    assert later[0].premises[0].rule == "cases.pomo:6"  # the epoch after the ping
    (busy,) = explain_run(result, 'busy("bob", _)', None, landing, ANY_TIME)
    assert busy.args == ("bob", 2)
    assert sorted(p.args for p in busy.premises) == [("ann",), ("bob",), ("bob",)]
    (tick,) = explain_run(result, "ticks(_)", 11, landing, ANY_TIME)
    assert [p.how for p in tick.premises] == ["clock", "input"]
    assert tick.premises[0].exp < NEVER


def test_an_event_that_is_not_there_or_not_an_event_is_said_so(tanks) -> None:
    landing, result = tanks
    assert explain_run(result, 'overflow_alert("nowhere")', None, landing, DEFAULT_TIMES) == []
    for bad, said in [
        ("overflow(_)", "no relation"),
        ('overflow_alert("north", _)', "has 1 column: tank"),
        ("overflow_alert(x)", "constants or `_`"),
        ("overflow_alert(", "is not an event"),
    ]:
        with pytest.raises(Exception, match=said):
            explain_run(result, bad, None, landing, DEFAULT_TIMES)


def test_what_a_dagster_pipeline_stored_explains_as_a_run_does(tanks, tmp_path: Path) -> None:
    """`pomo explain --warehouse` reads a pipeline's warehouse (no evaluation): an alert of a
    partition explains as the same alert of `pomo run` does."""
    from dagster import DagsterInstance, HourlyPartitionsDefinition

    from dagster_pomo.engine.explain import explain_warehouse
    from dagster_pomo.examples import outbox_handlers
    from dagster_pomo.orchestration import pomo_definitions
    from tests.test_dagster_assets import KEYS, _materialize_range

    landing, result = tanks
    corpus = RULES / "water_tanks.pomo"
    warehouse = tmp_path / "warehouse"
    partitions = HourlyPartitionsDefinition(start_date="2023-11-14-22:00")
    handlers = outbox_handlers(corpus, tmp_path / "outbox.sqlite")
    defs = pomo_definitions(
        corpus, partitions, str(warehouse), str(landing.parent), handlers=handlers
    )
    home = tmp_path / "home"
    home.mkdir()
    _materialize_range(defs, DagsterInstance.local_temp(str(home)), KEYS)
    program = load_program(corpus)
    last = result.events("overflow_alert")[-1]
    (stored,) = explain_warehouse(
        program, str(warehouse), HOUR, 'overflow_alert("north")', last.t, landing, DEFAULT_TIMES
    )
    (ran,) = explain_run(result, 'overflow_alert("north")', last.t, landing, DEFAULT_TIMES)
    assert stored.to_json() == ran.to_json()
    done = subprocess.run(
        [str(POMO), "explain", str(corpus), "--events", str(landing.parent), "--warehouse"]
        + [str(warehouse), "--at", str(last.t), 'overflow_alert("north")'],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == ran.render()[0]
