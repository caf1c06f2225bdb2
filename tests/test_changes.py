"""What each new version of an epoch changed: the events it added and withdrew.

A warehouse is evaluated over the water tanks' readings, then again after a late file (a
maintenance window that silences alerts already raised, and a reading of the first hour):
every stored relation's changes, epoch by epoch, are what two runs from scratch of the
reference evaluator, over the events before and after, tell apart. On each engine, through
`pomo run --changes` as documented, and when a replacement failed half-way.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from dagster_pomo.engine.actions import ActionEvent, Listener, insert_key, withdrawal_key
from dagster_pomo.engine.driver import _without_spark
from dagster_pomo.engine.pipeline import Pipeline, Storage
from dagster_pomo.engine.run import run
from dagster_pomo.engine.spark import epoch_changes
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.examples import (
    DEFAULT_START,
    HOUR,
    SqliteOutbox,
    outbox_handlers,
    water_tank_events,
)
from dagster_pomo.lang import load_program
from dagster_pomo.plan.units import units
from dagster_pomo.timeline import epochs
from tests.conftest import RULES

CORPUS = RULES / "water_tanks.pomo"
POMO = Path(sys.executable).with_name("pomo")
HOURS = 2
# Per relation, per epoch key: the events it holds, (arguments, t).
Stored = dict[str, dict[str, set[tuple[tuple[object, ...], int]]]]
# (relation, op, arguments, t, epoch key)
Changed = set[tuple[str, str, tuple[object, ...], int, str]]


def _landing(folder: Path) -> Path:
    """Two hours of readings, and north over its capacity from 23:30 to 23:40 (alerts)."""
    folder.mkdir(parents=True)
    water_tank_events(folder / "readings.jsonl", 2_000, hours=HOURS)
    second = DEFAULT_START + HOUR
    high = [
        {"relation": "water_level", "t": t, "args": {"tank": "north", "level": 120.0}}
        for t in range(second + 1_800_000, second + 2_400_000, 2_000)
    ]
    (folder / "high.jsonl").write_text("".join(json.dumps(e) + "\n" for e in high))
    return folder


def _late(folder: Path) -> None:
    """A maintenance window of north from 23:15 (its alerts withdrawn), a reading of the
    first hour, and a correction of the first reading (a delete line and an insert)."""
    first = json.loads((folder / "readings.jsonl").read_text().splitlines()[0])
    lines = [
        {"relation": "maintenance", "t": DEFAULT_START + HOUR + 900_000, "args": ["north", "x"]},
        {"relation": "water_level", "t": DEFAULT_START + 60_001, "args": ["south", 12.5]},
        {**first, "op": "delete"},
        {**first, "args": {**first["args"], "level": first["args"]["level"] + 1.0}},
    ]
    (folder / "late.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))


def _stored(landing: Path) -> Stored:
    """What an engine stores from ``landing``, by the reference evaluator: each version's
    event in the epoch of the time it became known (earlier times in the first). Worked
    out once per content of the landing folder."""
    content = tuple(sorted((f.name, f.read_text()) for f in landing.iterdir()))
    if content not in _REFERENCE:
        _REFERENCE[content] = _by_reference(landing)
    return _REFERENCE[content]


_REFERENCE: dict[tuple, Stored] = {}


def _by_reference(landing: Path) -> Stored:
    program = load_program(CORPUS)
    end = DEFAULT_START + HOURS * HOUR
    done = run(program, landing, HOUR, DEFAULT_START, end, engine="reference")
    out: Stored = defaultdict(lambda: defaultdict(set))
    for name, versions in {**done.ingested.events, **done.versions}.items():
        for v in versions:
            if v.kt < end:
                start = max(DEFAULT_START, v.kt // HOUR * HOUR)
                out[name][str(start)].add((tuple(v.args), v.t))
    return out


def _difference(before: Stored, after: Stored) -> Changed:
    out: Changed = set()
    for name in set(before) | set(after):
        for key in set(before.get(name, {})) | set(after.get(name, {})):
            old, new = before.get(name, {}).get(key, set()), after.get(name, {}).get(key, set())
            out |= {(name, "insert", a, t, key) for a, t in new - old}
            out |= {(name, "delete", a, t, key) for a, t in old - new}
    return out


def _same(got: Changed, expected: Changed) -> None:
    """``got`` is ``expected``, floats alike to 1e-9 of their size: engines sum an average's
    terms in different orders, and the last bit of a value carried into a head may differ."""

    def grouped(changes: Changed) -> dict[tuple, list[tuple[float, ...]]]:
        out: dict[tuple, list[tuple[float, ...]]] = defaultdict(list)
        for name, op, args, t, key in changes:
            exact = tuple(a for a in args if not isinstance(a, float))
            out[(name, op, t, key, exact)].append(tuple(a for a in args if isinstance(a, float)))
        return out

    mine, theirs = grouped(got), grouped(expected)
    assert set(mine) == set(theirs), set(mine) ^ set(theirs)
    for k, floats in mine.items():
        pairs = zip(sorted(floats), sorted(theirs[k]), strict=True)
        assert all(all(map(math.isclose, a, b)) for a, b in pairs), (k, floats, theirs[k])


def _read(folder: Path) -> Changed:
    """The changes `pomo run --changes` wrote to ``folder``."""
    return {
        (e["relation"], e["op"], tuple(e["args"]), e["t"], e["epoch"])
        for f in folder.glob("*.jsonl")
        for e in map(json.loads, f.read_text().splitlines())
    }


@pytest.mark.parametrize("engine", ["auto", "local", "spark"])
def test_a_late_file_adds_and_withdraws_what_runs_from_scratch_tell_apart(
    tmp_path: Path, engine: str
) -> None:
    program = load_program(CORPUS)
    landing = _landing(tmp_path / "landing")
    warehouse, end = str(tmp_path / "warehouse"), DEFAULT_START + HOURS * HOUR
    first = run(
        program, landing, HOUR, DEFAULT_START, end, engine, warehouse, changes=tmp_path / "c1"
    )
    before = _stored(landing)
    # A first version adds every event it holds.
    _same(_read(tmp_path / "c1"), _difference({}, before))
    assert first.changed is not None and first.changed["overflow_alert"][0] > 0
    _late(landing)
    second = run(
        program, landing, HOUR, DEFAULT_START, end, engine, warehouse, changes=tmp_path / "c2"
    )
    expected = _difference(before, _stored(landing))
    _same(_read(tmp_path / "c2"), expected)
    withdrawn = {c for c in expected if c[0] == "overflow_alert" and c[1] == "delete"}
    assert withdrawn and all(c[2][0] == "north" for c in withdrawn), "the case must withdraw"
    assert (
        "water_level",
        "insert",
        ("south", 12.5),
        DEFAULT_START + 60_001,
        str(DEFAULT_START),
    ) in expected
    corrected = {c[1] for c in expected if c[0] == "water_level" and c[3] == DEFAULT_START}
    assert corrected == {"insert", "delete"}, "the correction: one reading out, one in"
    counts = {
        n: (
            sum(c[0] == n and c[1] == "insert" for c in expected),
            sum(c[0] == n and c[1] == "delete" for c in expected),
        )
        for n in second.changed or {}
    }
    assert second.changed == counts
    # The warehouse says the same per epoch, and keeps nothing aside once recorded.
    wh = Warehouse(_without_spark(warehouse), warehouse, program.name)
    for name, (added, withdrawn_n) in counts.items():
        keys = [str(DEFAULT_START + i * HOUR) for i in range(HOURS)]
        found = [epoch_changes.change_of(wh, name, k) for k in keys]
        assert sum(c.added for c in found if c) == added
        assert sum(c.withdrawn for c in found if c) == withdrawn_n
    assert not (tmp_path / "warehouse" / program.name / epoch_changes.BEFORE).exists()


def test_pomo_run_changes_as_documented(tmp_path: Path) -> None:
    """`pomo run --warehouse DIR --changes DIR`, twice, as docs/semantics.md shows it."""
    landing = _landing(tmp_path / "landing")
    args = [str(POMO), "run", str(CORPUS), "--events", str(landing), "--engine", "local"]
    args += ["--start", str(DEFAULT_START), "--until", str(DEFAULT_START + HOURS * HOUR)]
    args += ["--warehouse", str(tmp_path / "wh"), "--quiet"]
    first = subprocess.run(
        [*args, "--changes", str(tmp_path / "c1")], capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    _late(landing)
    done = subprocess.run(
        [*args, "--changes", str(tmp_path / "c2")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert f"{tmp_path / 'c2' / 'maintenance.jsonl'}: 1 added, 0 withdrawn" in done.stdout
    assert "(1 event withdrawn by delete lines)" in done.stderr, "the correction's delete"
    alerts = [
        json.loads(x) for x in (tmp_path / "c2" / "overflow_alert.jsonl").read_text().splitlines()
    ]
    assert alerts and {a["op"] for a in alerts} == {"delete"}
    line = next(a for a in alerts)
    assert set(line) == {"op", "relation", "t", "args", "cid", "epoch"}
    # `pomo explain --warehouse` says why each was withdrawn.
    explain = [str(POMO), "explain", str(CORPUS), "--warehouse", str(tmp_path / "wh")]
    explain += ["--events", str(landing), "--quiet"]
    alert = alerts[0]
    said = subprocess.run(
        [*explain, 'overflow_alert("north")', "--at", str(alert["t"])],
        capture_output=True,
        text=True,
    )
    assert said.returncode == 0, said.stderr
    assert "withdrawn by the version of epoch 2023-11-14T23:00:00Z" in said.stdout
    assert 'but maintenance("north", _) now holds' in said.stdout
    assert f'maintenance("north", "x") at 2023-11-14T23:15:00Z  input, {landing}' in said.stdout
    first = json.loads((landing / "readings.jsonl").read_text().splitlines()[0])
    tank, level = first["args"]["tank"], first["args"]["level"]
    said = subprocess.run(
        [*explain, f'water_level("{tank}", {level!r})', "--at", str(first["t"])],
        capture_output=True,
        text=True,
    )
    assert said.returncode == 0, said.stderr
    assert f"deleted by the line at {landing / 'late.jsonl'}:3" in said.stdout
    refused = subprocess.run(
        [*args[:-3], "--engine", "reference", "--changes", str(tmp_path / "c3")],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "reference" in refused.stderr


def test_a_replacement_that_failed_is_recorded_by_the_next_against_what_stood_before(
    tmp_path: Path,
) -> None:
    """A version stored, then a replacement dropped half-way (the old files kept aside and
    the epoch removed, as a failed evaluation leaves it), then a third version: its changes
    are counted from the first, and the kept files are gone."""
    wh = Warehouse(_without_spark(str(tmp_path)), str(tmp_path), "c")
    schema = pa.schema([("a", pa.string()), ("t", pa.int64()), ("kt", pa.int64())])

    def table(*names: str) -> pa.Table:
        return pa.table({"a": list(names), "t": [1] * len(names), "kt": [1] * len(names)}, schema)

    wh.put("r", "0", table("x", "y"))
    assert epoch_changes.change_of(wh, "r", "0") == epoch_changes.Change(2, 0, True)
    wh.remove("r", "0", recorded=False)  # a failed evaluation drops what it stored
    assert epoch_changes.change_of(wh, "r", "0") is None
    wh.put("r", "0", table("y", "z", "z"))
    assert epoch_changes.change_of(wh, "r", "0") == epoch_changes.Change(1, 1, False)
    rows = epoch_changes.changed_events(wh, "r", "0")
    assert rows is not None and sorted(
        zip(rows["a"].to_pylist(), rows["weight"].to_pylist(), strict=True)
    ) == [("x", -1), ("z", 1)]
    assert not (tmp_path / "c" / epoch_changes.BEFORE).exists()
    wh.put("r", "0", table("y", "z"))  # the same events again: nothing changed
    assert epoch_changes.change_of(wh, "r", "0") == epoch_changes.Change(0, 0, False)
    wh.remove("r", "0")  # an epoch that now holds nothing
    assert epoch_changes.change_of(wh, "r", "0") == epoch_changes.Change(0, 2, False)
    wh.put("r", "0", table("q"))  # stored anew: a first version, no stale record
    assert epoch_changes.change_of(wh, "r", "0") == epoch_changes.Change(1, 0, True)


class _Told:
    """A `Listener` that records what it is told: (op, key, relation, args, t)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, tuple, int]] = []

    def listener(self) -> Listener:
        return Listener(self._record, self._record)

    def _record(self, event: ActionEvent) -> None:
        self.calls.append(
            (event.op, event.key, event.relation, tuple(event.args.values()), event.t)
        )

    def since(self, mark: int) -> list[tuple[str, str, str, tuple, int]]:
        return self.calls[mark:]


def _pipeline_run(pipeline: Pipeline, handlers: dict) -> None:
    """Both hours through the pipeline's steps, as a Dagster or Airflow run of them does:
    the inputs, each unit, each handler."""
    history = epochs(DEFAULT_START, DEFAULT_START + HOURS * HOUR, HOUR)
    driver, run_epochs = pipeline.driver(history, len(history))
    pipeline.land(driver, run_epochs)
    for unit in units(pipeline.program):
        pipeline.evaluate(driver, unit, run_epochs)
    for name, handler in handlers.items():
        pipeline.act(name, handler, run_epochs)


def test_a_listener_is_told_once_of_each_withdrawal_and_of_each_event_derived_again(
    tmp_path: Path,
) -> None:
    """Alerts handed over, then withdrawn by a late maintenance window: the listener is told
    of each withdrawal once (not again on a re-run); a correction landed (a delete line: the
    window was another tank's), the alerts are derived again and handed over again, once,
    under keys of their own. A plain handler is never told of withdrawals."""
    program = load_program(CORPUS)
    landing = _landing(tmp_path / "landing")
    pipeline = Pipeline(program, Storage(str(tmp_path / "wh"), str(landing)))
    alerts, log = _Told(), _Told()
    handlers = {"notify_operator": alerts.listener(), "log_maintenance": log._record}
    _pipeline_run(pipeline, handlers)
    first = {(c[2], c[3], c[4]): c[1] for c in alerts.calls}
    assert first and {c[0] for c in alerts.calls} == {"insert"}
    before = _stored(landing)["overflow_alert"]
    _late(landing)
    mark = len(alerts.calls)
    _pipeline_run(pipeline, handlers)
    after = _stored(landing)["overflow_alert"]
    gone = {e for events in before.values() for e in events} - {
        e for events in after.values() for e in events
    }
    told = alerts.since(mark)
    assert gone and {c[0] for c in told} == {"delete"}
    assert _close({(c[3], c[4]) for c in told}, gone)
    assert all(c[1] == withdrawal_key(first[(c[2], c[3], c[4])], 1) for c in told)
    assert [c[0] for c in log.calls] == ["insert"], "the window is logged"
    mark = len(alerts.calls)
    _pipeline_run(pipeline, handlers)
    assert alerts.since(mark) == [], "a re-run tells nothing again"
    # A correction lands: the window was east's (a delete line and an insert).
    window = {"relation": "maintenance", "t": DEFAULT_START + HOUR + 900_000}
    fixed = [{**window, "args": ["north", "x"], "op": "delete"}, {**window, "args": ["east", "x"]}]
    (landing / "fix.jsonl").write_text("".join(json.dumps(e) + "\n" for e in fixed))
    _pipeline_run(pipeline, handlers)
    again = alerts.since(mark)
    assert {c[0] for c in again} == {"insert"} and _close({(c[3], c[4]) for c in again}, gone)
    assert all(c[1] == insert_key(first[(c[2], c[3], c[4])], 2) for c in again)
    assert [c[0] for c in log.calls] == ["insert", "insert"], "not told of north's withdrawal"
    mark = len(alerts.calls)
    _pipeline_run(pipeline, handlers)
    assert alerts.since(mark) == []


def test_late_readings_that_revise_a_high_minute_do_not_alert_again(tmp_path: Path) -> None:
    """The example alerts once per tank and crossing, keyed by the tank and the minute:
    late readings in the minutes north is over capacity change those minutes' averages
    (new `high_minute` events, the old ones withdrawn) and tell the alert's handler
    nothing, neither a new alert nor a withdrawal."""
    program = load_program(CORPUS)
    landing = _landing(tmp_path / "landing")
    pipeline = Pipeline(program, Storage(str(tmp_path / "wh"), str(landing)))
    alerts = _Told()
    handlers = {"notify_operator": alerts.listener(), "log_maintenance": _ignore}
    _pipeline_run(pipeline, handlers)
    crossing = DEFAULT_START + HOUR + 1_800_000 + 30_000  # 23:30, stamped mid-minute
    assert [(c[0], c[3], c[4]) for c in alerts.calls] == [("insert", ("north",), crossing)]
    before = _stored(landing)
    late = [
        {"relation": "water_level", "t": t, "args": {"tank": "north", "level": 130.0}}
        for t in range(crossing - 29_001, crossing + 540_000, 60_000)  # each high minute
    ]
    (landing / "late.jsonl").write_text("".join(json.dumps(e) + "\n" for e in late))
    mark = len(alerts.calls)
    _pipeline_run(pipeline, handlers)
    after = _stored(landing)
    assert alerts.since(mark) == []
    assert after["overflow_alert"] == before["overflow_alert"]
    assert after["high_minute"] != before["high_minute"], "the late readings reach the alerts"


def _close(got: set[tuple[tuple, int]], expected: set[tuple[tuple, int]]) -> bool:
    """The same events, floats alike to 1e-9 of their size (see `_same`)."""
    changes = {("r", "delete", args, t, "0") for args, t in got}
    _same(changes, {("r", "delete", args, t, "0") for args, t in expected})
    return True


def test_dagster_partitions_say_what_a_late_file_added_and_withdrew(tmp_path: Path) -> None:
    """Both hours materialized, the late file landed, both materialized again (as the
    landing sensor replays them): each relation's partition carries the events its new
    version added and withdrew (`pomo/added`, `pomo/withdrawn`), which two runs from
    scratch tell apart, and the listener's action partition how many withdrawals it told."""
    from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, HourlyPartitionsDefinition

    from dagster_pomo.orchestration import pomo_definitions
    from tests.test_dagster_assets import materialize_each

    landing = _landing(tmp_path / "landing")
    told = _Told()
    handlers = {"notify_operator": told.listener(), "log_maintenance": lambda event: None}
    partitions = HourlyPartitionsDefinition(start_date="2023-11-14-22:00")
    defs = pomo_definitions(
        CORPUS, partitions, str(tmp_path / "wh"), str(landing), handlers=handlers
    )
    (tmp_path / "home").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "home"))
    keys = {"2023-11-14-22:00": str(DEFAULT_START), "2023-11-14-23:00": str(DEFAULT_START + HOUR)}

    def metadata(asset: list[str], partition: str) -> dict[str, object]:
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[partition]), limit=1
        ).records
        return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}

    materialize_each(defs, instance, keys)
    before = _stored(landing)
    _late(landing)
    materialize_each(defs, instance, keys)
    expected = _difference(before, _stored(landing))
    withdrawn_alerts = 0
    for relation in ("water_level", "maintenance", "level_10m", "overflow_alert"):
        for partition, start in keys.items():
            mine = [c for c in expected if c[0] == relation and c[4] == start]
            found = metadata(["water_tanks", relation], partition)
            assert found["pomo/added"] == sum(c[1] == "insert" for c in mine), (relation, start)
            assert found["pomo/withdrawn"] == sum(c[1] == "delete" for c in mine), (relation, start)
            if relation == "overflow_alert":
                withdrawn_alerts += found["pomo/withdrawn"]
    assert withdrawn_alerts > 0, "the case must withdraw alerts"
    actions = [metadata(["water_tanks", "action", "notify_operator"], p) for p in keys]
    assert sum(m["pomo/actions_withdrawn"] for m in actions) == withdrawn_alerts
    assert sum(c[0] == "delete" for c in told.calls) == withdrawn_alerts


def test_the_example_outbox_records_the_withdrawals_of_what_it_recorded(tmp_path: Path) -> None:
    """The example code locations' handlers (`outbox_handlers(..., withdrawals=True)`) keep
    each withdrawal beside the effects, once."""
    landing = _landing(tmp_path / "landing")
    pipeline = Pipeline(load_program(CORPUS), Storage(str(tmp_path / "wh"), str(landing)))
    handlers = outbox_handlers(CORPUS, tmp_path / "outbox.sqlite", withdrawals=True)
    _pipeline_run(pipeline, handlers)
    before = _stored(landing)["overflow_alert"]
    _late(landing)
    _pipeline_run(pipeline, handlers)
    _pipeline_run(pipeline, handlers)
    gone = {e for es in before.values() for e in es} - {
        e for es in _stored(landing)["overflow_alert"].values() for e in es
    }
    withdrawn = SqliteOutbox(tmp_path / "outbox.sqlite").withdrawn()
    assert len(withdrawn) == len(gone) and {r[:2] for r in withdrawn} == {
        ("notify_operator", "overflow_alert")
    }
    assert _close({(tuple(json.loads(a).values()), t) for *_, a, t in withdrawn}, gone)


def test_a_listener_may_hear_withdrawals_only(tmp_path: Path) -> None:
    """`Listener(None, withdrawn)`: the events are recorded as handed over without a call,
    and their withdrawals reach ``withdrawn``, once."""
    landing = _landing(tmp_path / "landing")
    pipeline = Pipeline(load_program(CORPUS), Storage(str(tmp_path / "wh"), str(landing)))
    told = _Told()
    handlers = {"notify_operator": Listener(None, told._record), "log_maintenance": _ignore}
    _pipeline_run(pipeline, handlers)
    assert told.calls == [], "no insertion is told"
    _late(landing)
    _pipeline_run(pipeline, handlers)
    _pipeline_run(pipeline, handlers)
    assert told.calls and {c[0] for c in told.calls} == {"delete"}
    assert len({c[1] for c in told.calls}) == len(told.calls), "each once"


def _ignore(event: ActionEvent) -> None:
    """A handler that does nothing."""
