"""Actions run exactly once per distinct event, whatever crashes in between.

The ledger is exercised with real processes killed (``os._exit``) or handlers
raising at random points: before the effect, after the effect but before the
ledger records it, and after the ledger records it. Deliveries overlap, as
re-runs and backfills do. The Dagster test then runs the handlers as assets on
real Spark: failures fail the step with the event named, a second
materialization retries exactly those, backfills and late data run nothing
twice.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from dagster_pomo.engine.actions import (
    ActionEvent,
    Ledger,
    check_handlers,
    idempotency_key,
    insert_key,
    open_ledger,
    run_actions,
    subscriptions,
    withdrawal_key,
)
from dagster_pomo.engine.cid import cid
from dagster_pomo.engine.emit import MAX_GENERATION, EmitError, Emitted, Emitter, generation
from dagster_pomo.engine.ledger.claims import HOST
from dagster_pomo.examples import SqliteOutbox
from dagster_pomo.lang import compile_corpus

KILL_POINTS = ("before_effect", "after_effect", "after_ledger")
RAISE_POINTS = ("raise_before_effect", "raise_after_effect")


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_at(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's ledger lives: a SQLite file, or a fresh database on a real PostgreSQL
    server; the fault tests run on both."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    from tests.postgres import new_database

    return new_database(request.getfixturevalue("postgres"))


class Recorder:
    """A handler that de-duplicates by key (``effects``), logs every call (``calls``), and
    records a violation whenever it is handed a key the ledger holds as done."""

    def __init__(self, path: Path, ledger: str, fail: tuple[str, str] | None = None) -> None:
        self.path, self.ledger, self.fail = path, ledger, fail
        self._book: tuple[int, Ledger] | None = None  # this process's own connection

    def _done(self, key: str) -> bool:
        if self._book is None or self._book[0] != os.getpid():
            self._book = (os.getpid(), open_ledger(self.ledger, "tests"))
        return bool(self._book[1].done([key]))

    def __call__(self, event: ActionEvent) -> None:
        point, key = self.fail or ("", "")
        if point == "raise_before_effect" and event.key == key:
            raise RuntimeError("injected: before the effect")
        state = ("done",) if self._done(event.key) else None
        with closing(sqlite3.connect(self.path, timeout=30)) as db, db:
            db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT)")
            db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY)")
            db.execute("CREATE TABLE IF NOT EXISTS violations (key TEXT)")
            db.execute("INSERT INTO calls VALUES (?)", (event.key,))
            db.execute("INSERT INTO effects VALUES (?) ON CONFLICT DO NOTHING", (event.key,))
            if state and state[0] == "done":
                db.execute("INSERT INTO violations VALUES (?)", (event.key,))
        if point == "raise_after_effect" and event.key == key:
            raise RuntimeError("injected: after the effect")

    def table(self, name: str) -> list[str]:
        with closing(sqlite3.connect(self.path)) as db:
            return [k for (k,) in db.execute(f"SELECT key FROM {name}")]  # noqa: S608


def _events(n: int) -> list[ActionEvent]:
    return [
        ActionEvent(idempotency_key("h", "r", (i,), 1000 + i), "h", "r", {"x": i}, 1000 + i, "0")
        for i in range(n)
    ]


def _run_in_child(
    events,  # noqa: ANN001
    ledger: str,
    handler: Recorder,
    kill: tuple[str, str] | None,
    emit: Emitter | None = None,
) -> int:
    """Run the actions in a forked process that dies at ``kill`` (what the handler returns
    landed by ``emit``); its exit status."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 0
        try:

            def hook(point: str, event: ActionEvent) -> None:
                if kill and (point, event.key) == kill:
                    os._exit(3)

            led = open_ledger(ledger, "tests")
            report = run_actions(handler, events, led, batch=8, hook=hook, emit=emit)
            led.close()
            status = 4 if report.failed else 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_every_event_has_its_effect_exactly_once_under_injected_faults(
    tmp_path: Path, ledger_at: str
) -> None:
    rng = random.Random(20261122)
    ledger_path, effects = ledger_at, tmp_path / "effects.sqlite"
    open_ledger(ledger_path, "tests").close()
    events = _events(1000)
    faults = {p: 0 for p in KILL_POINTS + RAISE_POINTS}
    delivered = 30
    for i in range(60):
        # Each delivery re-sends everything delivered before (as a re-run or a backfill
        # does), and new events whenever few are left to act on.
        with closing(open_ledger(ledger_path, "tests")) as led:
            done = led.done([e.key for e in events[:delivered]])
        pending = [e for e in events[:delivered] if e.key not in done]
        if len(pending) < 6:
            pending += events[delivered : delivered + 30]
            delivered += 30
        delivery = events[:delivered]
        point = (KILL_POINTS + RAISE_POINTS)[i % 5]
        target = rng.choice(pending[:6]).key
        if point in KILL_POINTS:
            handler = Recorder(effects, ledger_path)
            code = _run_in_child(delivery, ledger_path, handler, (point, target))
            assert code == 3, "the child died where the fault was injected"
        else:
            handler = Recorder(effects, ledger_path, (point, target))
            code = _run_in_child(delivery, ledger_path, handler, None)
            assert code == 4, "the handler's failure is reported, not lost"
        faults[point] += 1
    events = events[:delivered]
    assert _run_in_child(events, ledger_path, Recorder(effects, ledger_path), None) == 0

    recorder = Recorder(effects, ledger_path)
    total = sum(faults.values())
    print(f"injected faults: {total} {faults}")
    assert total >= 50 and all(faults.values())
    assert sorted(recorder.table("effects")) == sorted(e.key for e in events), "none lost"
    assert recorder.table("violations") == [], "a finished action was handed over again"
    calls = recorder.table("calls")
    assert len(calls) > len(events), "interrupted actions were retried"
    assert len(calls) <= len(events) + total, "a fault repeats at most the call in flight"
    with closing(open_ledger(ledger_path, "tests")) as led:
        assert led.counts("h") == {"done": len(events)}
        attempts = led.attempts("h")
    assert max(attempts.values()) > 1 and min(attempts.values()) == 1


def test_a_failing_handler_leaves_the_event_failed_and_the_rest_done(
    tmp_path: Path, ledger_at: str
) -> None:
    events = _events(20)
    ledger = open_ledger(ledger_at, "tests")
    fault = ("raise_before_effect", events[5].key)
    handler = Recorder(tmp_path / "effects.sqlite", ledger_at, fault)
    report = run_actions(handler, events, ledger, batch=4)
    assert report.ran == 19 and [e.key for e, _ in report.failed] == [events[5].key]
    assert "injected: before the effect" in report.failed[0][1]
    assert ledger.counts("h") == {"done": 19, "failed": 1}
    again = run_actions(Recorder(handler.path, ledger_at), events, ledger, batch=4)
    assert (again.ran, again.skipped, again.failed) == (1, 19, [])
    ledger.close()


def test_idempotency_keys_name_the_handler_and_the_event() -> None:
    key = idempotency_key("notify", "alert", ("north", 1.5), 60_000)
    assert key == idempotency_key("notify", "alert", ("north", 1.5), 60_000)
    others = {
        idempotency_key("page", "alert", ("north", 1.5), 60_000),
        idempotency_key("notify", "alert", ("south", 1.5), 60_000),
        idempotency_key("notify", "alert", ("north", 1.5), 60_001),
        idempotency_key("notify", "alarm", ("north", 1.5), 60_000),
    }
    assert key not in others and len(others) == 4
    # The event's content ID, as a rule binds it with `C := alert(...)`.
    assert key == "notify:" + cid("alert", ["north", 1.5], 60_000)


def test_a_ledger_keyed_before_content_ids_is_rekeyed_and_hands_nothing_over_again(
    tmp_path: Path,
) -> None:
    """Rows whose keys were a SHA-256 of handler and event get `handler:content ID` when
    the ledger is opened, states kept: what was done is not handed over again."""
    path = tmp_path / "ledger.sqlite"
    events = [
        ActionEvent(
            idempotency_key("h", "r", (i, 0.5), 1000 + i),
            "h",
            "r",
            {"x": i, "y": 0.5},
            1000 + i,
            "0",
        )
        for i in range(3)
    ]
    ledger = open_ledger(path)
    assert run_actions(lambda e: None, events, ledger).ran == 3
    ledger.close()
    db = sqlite3.connect(path)
    for old, e in enumerate(events):  # as an older version wrote them
        db.execute("UPDATE actions SET key = ? WHERE key = ?", (f"{old:064x}", e.key))
    db.execute("PRAGMA user_version = 0")  # which it never set
    db.commit()
    db.close()
    ledger = open_ledger(path)
    again = run_actions(lambda e: pytest.fail(f"handed over again: {e.key}"), events, ledger)
    assert (again.ran, again.skipped) == (0, 3)
    assert ledger.counts("h") == {"done": 3}
    ledger.close()


def test_a_claim_holds_until_its_lease_ends_or_its_owner_dies(ledger_at: str) -> None:
    """A live owner's claim is left to it until its lease ends; an owner of this machine
    whose process is gone loses it at once; a claim of another machine only by its lease."""
    events = _events(3)
    mine = f"{HOST}:{os.getpid()}:other-call"
    with closing(open_ledger(ledger_at, "tests")) as led:
        claimed, held = led.claim(events[:1], mine, lease=1.0)
        assert (len(claimed), held) == (1, 0)
        assert led.claim(events[:1], "me", lease=60)[1] == 1, "a live owner's lease holds"
        time.sleep(1.2)
        claimed, held = led.claim(events[:1], "me", lease=60)
        assert ([e.key for e in claimed], held) == ([events[0].key], 0), "the lease ended"
        said = [sys.executable, "-c", "import os; print(os.getpid())"]
        dead = subprocess.run(said, capture_output=True, text=True, check=True).stdout.strip()
        assert led.claim(events[1:2], f"{HOST}:{dead}:gone", lease=60)[0]
        claimed, held = led.claim(events[1:2], "me", lease=60)
        assert (len(claimed), held) == (1, 0), "a dead process of this machine holds nothing"
        assert led.claim(events[2:], "elsewhere:1:x", lease=60)[0]
        assert led.claim(events[2:], "me", lease=60)[1] == 1, "another machine: its lease"
        led.finish([e.key for e in events])
        assert led.claim(events, "me") == ([], 0), "done is never handed over again"
        assert led.attempts("h") == {events[0].key: 2, events[1].key: 2, events[2].key: 1}


def test_the_postgres_ledger_keeps_corpora_apart_and_versions_its_schema(postgres: str) -> None:
    import psycopg

    from dagster_pomo.errors import UsageError
    from tests.postgres import new_database

    url = new_database(postgres)
    events = _events(4)
    with closing(open_ledger(url, "shop")) as shop, closing(open_ledger(url, "tanks")) as tanks:
        assert run_actions(lambda e: None, events, shop).ran == 4
        assert run_actions(lambda e: None, events, tanks).ran == 4, "another corpus's keys"
        assert shop.counts() == tanks.counts() == {"done": 4}
    with psycopg.connect(url, autocommit=True) as db:
        assert db.execute("SELECT version FROM pomo_ledger_schema").fetchall() == [(1,)]
        db.execute("INSERT INTO pomo_ledger_schema VALUES (2)")
    with pytest.raises(UsageError, match="schema version 2, written by a newer dagster-pomo"):
        open_ledger(url, "shop")
    secret = url.replace("pomo@", "pomo:hunter2@").replace(url.rsplit("/", 1)[1], "nothing")
    with pytest.raises(UsageError, match="cannot open the action ledger at") as failed:
        open_ledger(secret, "shop")
    assert "hunter2" not in str(failed.value) and "pomo:***@" in str(failed.value)


def test_the_ledger_is_found_where_storage_says(
    tmp_path: Path, postgres: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ledger` as a folder or a URL; unset, `POMO_LEDGER`; neither, beside the warehouse."""
    from dagster_pomo.engine.pipeline import Storage
    from tests.postgres import new_database

    url = new_database(postgres)
    monkeypatch.delenv("POMO_LEDGER", raising=False)
    beside = Storage(str(tmp_path / "wh"), str(tmp_path / "landing"))
    assert beside.ledger_location("shop") == str(tmp_path / "wh" / "shop" / "_actions.sqlite")
    folder = Storage(str(tmp_path / "wh"), "l", ledger=str(tmp_path / "ledgers"))
    assert folder.ledger_location("shop") == str(tmp_path / "ledgers" / "shop_actions.sqlite")
    monkeypatch.setenv("POMO_LEDGER", url)
    assert beside.ledger_location("shop") == url
    with closing(beside.open_ledger("shop")) as led:
        assert run_actions(lambda e: None, _events(2), led).ran == 2
    with closing(open_ledger(url, "shop")) as led:
        assert led.counts("h") == {"done": 2}
    assert beside.beside_ledger("shop", "_seen.json") == tmp_path / "wh" / "shop" / "_seen.json"
    assert folder.ledger_location("shop").endswith("shop_actions.sqlite"), "`ledger` first"


def test_subscription_patterns_filter_by_constants_and_repeated_variables() -> None:
    program = compile_corpus(
        """
        .decl move(src: str, dst: str, n: int);
        move("a", _, _) ~ from_a;
        move(x, x, _) ~ stay;
        alert(s, n) ~ page := move(s, _, n) if n > 3;
        """,
        "subs.pomo",
    )
    subs = subscriptions(program)
    assert [(s.relation, s.equals, s.same) for s in subs["from_a"]] == [
        ("move", (("src", "a"),), ())
    ]
    assert [(s.relation, s.equals, s.same) for s in subs["stay"]] == [
        ("move", (), (("src", "dst"),))
    ]
    assert [(s.relation, s.equals, s.same) for s in subs["page"]] == [("alert", (), ())]


def test_every_named_handler_must_be_registered_and_every_registered_one_named(
    tmp_path: Path,
) -> None:
    program = compile_corpus("p(x) ~ notify := q(x);", "h.pomo")
    (missing,) = check_handlers(program, {})
    assert missing.startswith("h.pomo:1:1: the corpus subscribes `notify`")
    (extra,) = check_handlers(program, {"notify": print, "notfiy": print})
    assert "`notfiy` is registered" in extra
    with pytest.raises(Exception, match="no handler of that name is registered"):
        from dagster import HourlyPartitionsDefinition

        from dagster_pomo.orchestration import pomo_definitions

        path = tmp_path / "handler.pomo"
        path.write_text(".decl q(x: int);\np(x) ~ notify := q(x);\n")
        pomo_definitions(path, HourlyPartitionsDefinition("2024-01-01-00:00"), "w", "l")


class Flaky(SqliteOutbox):
    """The example outbox, failing the first time it sees every third event (before or after
    its effect, alternately)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.seen: set[str] = set()
        self.calls = 0
        self.injected = 0

    def __call__(self, event: ActionEvent) -> None:
        self.calls += 1
        first = event.key not in self.seen
        self.seen.add(event.key)
        digest = event.key.rsplit(":", 1)[-1]  # `handler:content ID`, hex
        poisoned = first and int(digest[:8], 16) % 3 == 0
        if poisoned and int(digest[8:16], 16) % 2 == 0:
            self.injected += 1
            raise RuntimeError("injected: the operator's pager is down")
        super().__call__(event)
        if poisoned:
            self.injected += 1
            raise RuntimeError("injected: timed out after sending")


def _rising_tanks(path: Path) -> None:
    """Three hours of readings every 30 s: `north` is filled to 95% of its capacity and
    drained to 80% by turns, six minutes each (an alert at every crossing of 90%, the five
    minutes below between them re-arming it), `south` stays at half; `north` is in
    maintenance from minute 150 (no alerts after)."""
    from tests.test_dagster_assets import START

    lines = []
    for i in range(360):
        t = START + i * 30_000
        level = 95.0 if (i // 12) % 2 else 80.0
        lines.append(("water_level", t, ["north", level + (i % 3) / 10]))
        lines.append(("water_level", t, ["south", 40.0]))
    lines.append(("maintenance", START + 150 * 60_000, ["north", "pump swap"]))
    path.write_text(
        "".join(f'{{"relation": "{r}", "t": {t}, "args": {json.dumps(a)}}}\n' for r, t, a in lines)
    )


def test_handlers_as_assets_fail_loudly_retry_and_never_repeat(tmp_path: Path) -> None:
    from dagster import (
        AssetCheckKey,
        AssetKey,
        DagsterInstance,
        build_sensor_context,
        materialize,
    )

    from dagster_pomo.engine.run import run
    from dagster_pomo.examples import HOUR
    from dagster_pomo.lang import load_program
    from dagster_pomo.orchestration import pomo_definitions
    from tests.compare import rounded
    from tests.conftest import RULES
    from tests.test_dagster_assets import KEYS, PARTITIONS, START

    landing, warehouse, home = tmp_path / "landing", tmp_path / "warehouse", tmp_path / "home"
    for d in (landing, home):
        d.mkdir()
    _rising_tanks(landing / "tanks.jsonl")
    corpus = RULES / "water_tanks.pomo"
    alerts = Flaky(tmp_path / "outbox.sqlite")
    handlers = {
        "notify_operator": alerts,
        "log_maintenance": SqliteOutbox(tmp_path / "outbox.sqlite"),
    }
    defs = pomo_definitions(corpus, PARTITIONS, str(warehouse), str(landing), handlers=handlers)
    instance = DagsterInstance.local_temp(str(home))
    action = AssetKey(["water_tanks", "action", "notify_operator"])
    assert action in {k for a in defs.assets for k in a.keys}

    def materialize_range(first: str, last: str):
        return materialize(
            list(defs.assets),
            instance=instance,
            resources=dict(defs.resources),
            tags={
                "dagster/asset_partition_range_start": first,
                "dagster/asset_partition_range_end": last,
            },
            raise_on_error=False,
        )

    def expected() -> set[tuple[str, str, tuple, int]]:
        """Every alert the reference evaluator derives, and every maintenance window landed."""
        program, until = load_program(corpus), START + 3 * HOUR
        result = run(program, landing, HOUR, start=START, until=until, engine="reference")
        alerts = {
            ("notify_operator", "overflow_alert", rounded(r.args), r.t)
            for r in result.events("overflow_alert")
        }
        lines = [json.loads(x) for f in landing.glob("*.jsonl") for x in f.read_text().splitlines()]
        return alerts | {
            ("log_maintenance", "maintenance", tuple(e["args"]), e["t"])
            for e in lines
            if e["relation"] == "maintenance"
        }

    def effects() -> list[tuple[str, str, tuple, int]]:
        return [
            (h, rel, rounded(tuple(json.loads(a).values())), t) for h, rel, a, t in alerts.effects()
        ]

    failed = materialize_range(KEYS[0], KEYS[-1])
    assert not failed.success
    (failure,) = [e for e in failed.all_events if e.event_type_value == "STEP_FAILURE"]
    message = str(failure.event_specific_data.error)
    assert "handler `notify_operator` failed on" in message and "overflow_alert(" in message
    assert "injected:" in message
    injected = alerts.injected
    assert injected > 0
    check = AssetCheckKey(action, "every_event_handed_over")

    def handed_over() -> tuple[str, int]:
        """The latest evaluation of the handler's check: its status and failed count."""
        (latest,) = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [check]
        ).values()
        evaluation = latest.event.dagster_event.event_specific_data  # type: ignore[union-attr]
        return latest.status.value, evaluation.metadata["pomo/actions_failed"].value

    status, failed_events = handed_over()
    assert status == "FAILED" and failed_events == injected

    assert materialize_range(KEYS[0], KEYS[-1]).success, "a second run retries the failures"
    assert handed_over() == ("SUCCEEDED", 0)
    want = expected()
    assert len(want) > 10
    got = effects()
    assert len(got) == len(set(got)) and set(got) == want, "every event has one effect"
    assert instance.get_materialized_partitions(action) == set(KEYS)

    calls = alerts.calls

    # A late maintenance window in the first hour: the sensor replays from that epoch on, a
    # backfill over the same range that hands no finished action over again.
    (late,) = [s for s in defs.sensors]
    storage = defs.resources["storage"]
    ctx = build_sensor_context(
        instance=instance, resources={"storage": storage}, repository_def=defs.get_repository_def()
    )
    first_tick = late.evaluate_tick(ctx)
    late_window = {"relation": "maintenance", "t": START + 5 * 60_000, "args": ["south", "valve"]}
    (landing / "late.jsonl").write_text(json.dumps(late_window) + "\n")
    ctx = build_sensor_context(
        instance=instance,
        cursor=first_tick.cursor,
        resources={"storage": storage},
        repository_def=defs.get_repository_def(),
    )
    (request,) = late.evaluate_tick(ctx).run_requests
    assert (
        request.tags["dagster/asset_partition_range_start"],
        request.tags["dagster/asset_partition_range_end"],
    ) == (KEYS[0], KEYS[-1])
    assert materialize_range(KEYS[0], KEYS[-1]).success
    assert alerts.calls == calls, "finished actions are never handed over again"
    now = effects()
    assert set(now) == expected() and len(now) == len(set(now))
    assert ("log_maintenance", "maintenance", ("south", "valve"), START + 5 * 60_000) in now
    print(f"faults injected through Dagster: {injected}")


def test_a_range_hands_each_event_once_with_its_first_epoch_in_order(tmp_path: Path) -> None:
    """A handler's events over a range of epochs, read at once: an event stored in two
    epochs (derived again at a later time) comes once, with the first; the order is epoch,
    then relation, then time; patterns filter."""
    from dagster_pomo.engine.actions import subscriptions
    from dagster_pomo.engine.spark.frames import arrow_table
    from dagster_pomo.engine.spark.handler_events import range_events
    from dagster_pomo.engine.spark.session import spark_session
    from dagster_pomo.engine.spark.stored_versions import struct_of
    from dagster_pomo.engine.spark.warehouse import Warehouse
    from dagster_pomo.lang import compile_corpus
    from dagster_pomo.plan.schema import infer_schemas

    program = compile_corpus(
        ".decl a(x: int);\nd(x) := a(x);\ne(x) := a(x);\nd(_) ~ h;\ne(2) ~ h;\n", "r.pomo"
    )
    schemas = infer_schemas(program, {})
    wh = Warehouse(spark_session(), str(tmp_path / "wh"), program.name)
    stored = {  # (relation, epoch key): rows of (x, t, kt, exp, _tau)
        ("d", "0"): [(1, 5, 5, 50, 5), (2, 3, 3, 50, 3)],
        ("d", "10"): [(1, 5, 12, 50, 12), (3, 11, 11, 50, 11)],
        ("e", "0"): [(2, 4, 4, 50, 4), (1, 1, 1, 50, 1)],
        ("e", "20"): [(2, 21, 21, 50, 21)],
    }
    for (relation, key), rows in stored.items():
        wh.put(relation, key, arrow_table(rows, struct_of(schemas[relation])))
    (subs,) = subscriptions(program).values()
    got = [
        (e.epoch, e.relation, e.args["c0"], e.t)
        for e in range_events(wh, schemas, subs, ["0", "10", "20"])
    ]
    assert got == [
        ("0", "d", 2, 3),
        ("0", "d", 1, 5),
        ("0", "e", 2, 4),
        ("10", "d", 3, 11),
        ("20", "e", 2, 21),
    ]
    assert len({e.key for e in range_events(wh, schemas, subs, ["10"])}) == 2


def _worker(
    ledger: Path, effects: Path, count: int, pause: float, phase: str = "insert"
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.action_worker", str(ledger), str(effects), str(count)]
        + [str(pause), phase],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        text=True,
    )


def _killed_until_done(
    ledger: Path,
    effects: Path,
    count: int,
    rng: random.Random,
    tries: int,
    after: tuple[float, float],
    phase: str = "insert",
) -> int:
    """Start a worker over ``phase`` and SIGKILL it a random time ``after`` its start, up to
    ``tries`` times, then let one get to the end by itself; how many were killed."""
    kills = 0
    for _ in range(tries):
        worker = _worker(ledger, effects, count, 0.01, phase)
        time.sleep(rng.uniform(*after))
        if worker.poll() is not None:
            break
        worker.send_signal(signal.SIGKILL)
        kills += 1
        worker.wait()
    if worker.returncode is not None and worker.returncode < 0:
        worker = _worker(ledger, effects, count, 0.01, phase)
    assert worker.wait(timeout=300) == 0
    return kills


def test_sigkill_at_random_points_repeats_at_most_the_call_in_flight(
    tmp_path: Path, ledger_at: str
) -> None:
    """A real process killed with SIGKILL wherever it happens to be (inside the handler,
    the ledger's transaction, Python's start-up): each kill costs at most one extra call,
    and a handler that records keys has exactly one effect per event."""
    rng = random.Random(35)
    ledger, effects, count = ledger_at, tmp_path / "effects.sqlite", 1500
    kills = _killed_until_done(ledger, effects, count, rng, 16, (0.2, 1.5))
    recorder = Recorder(effects, ledger)
    calls = recorder.table("calls")
    print(f"{kills} SIGKILLs, {len(calls)} calls for {count} events")
    assert kills >= 8
    assert sorted(recorder.table("effects")) == sorted(e.key for e in _events(count))
    assert recorder.table("violations") == []
    assert len(calls) <= count + kills, "each kill repeats at most the call in flight"
    with closing(open_ledger(ledger, "tests")) as led:
        assert led.counts("h") == {"done": count}


def test_sigkill_while_withdrawing_tells_each_withdrawal_once(
    tmp_path: Path, ledger_at: str
) -> None:
    """Events handed over, then their withdrawals to a handler told of them by a process
    killed with SIGKILL at random points, then the events derived again: each withdrawal
    and each new handing over has exactly one effect, every kill repeats at most the call
    in flight, and a withdrawal's key is never handed over once the ledger holds it."""
    rng = random.Random(59)
    ledger, effects, count = ledger_at, tmp_path / "effects.sqlite", 600
    assert _worker(ledger, effects, count, 0.0).wait(timeout=300) == 0
    kills = _killed_until_done(ledger, effects, count, rng, 8, (0.3, 1.2), "withdraw")
    # Told again: nothing is due twice.
    assert _worker(ledger, effects, count, 0.0, "withdraw").wait(timeout=300) == 0
    assert _worker(ledger, effects, count, 0.0, "again").wait(timeout=300) == 0
    recorder = Recorder(effects, ledger)
    bases = [e.key for e in _events(count)]
    expected = [*bases, *(withdrawal_key(b, 1) for b in bases), *(insert_key(b, 2) for b in bases)]
    assert sorted(recorder.table("effects")) == sorted(expected)
    assert recorder.table("violations") == []
    told = [k for k in recorder.table("calls") if k.endswith(":withdrawn")]
    print(f"{kills} SIGKILLs, {len(told)} withdrawal calls for {count} events")
    assert kills >= 3
    assert len(told) <= count + kills, "each kill repeats at most the call in flight"
    with closing(open_ledger(ledger, "tests")) as led:
        assert led.counts("h") == {"done": 3 * count}


def test_two_overlapping_runs_never_hand_an_event_over_twice(
    tmp_path: Path, ledger_at: str
) -> None:
    """A sensor run and a scheduled run over the same events, at the same time, with a
    handler that does not de-duplicate: every event is handed over once, by one of them."""
    ledger, effects, count = ledger_at, tmp_path / "effects.sqlite", 600
    open_ledger(ledger, "tests").close()
    first = _worker(ledger, effects, count, 0.002)
    second = _worker(ledger, effects, count, 0.002)
    outputs = [w.communicate(timeout=300)[0] for w in (first, second)]
    assert first.returncode == second.returncode == 0
    calls = Recorder(effects, ledger).table("calls")
    assert sorted(calls) == sorted(e.key for e in _events(count)), "each event once, none lost"
    ran = [int(o.split()[0].removeprefix("ran=")) for o in outputs]
    assert sum(ran) == count and min(ran) > 0, f"both runs took part: {outputs}"


class Emitting(Recorder):
    """A recording handler that returns an event to land for each event it is handed."""

    def __call__(self, event: ActionEvent) -> list[Emitted]:
        super().__call__(event)
        return [Emitted("reply", [event.args["x"]], event.t + 1)]


def test_events_a_handler_returns_land_once_per_event_under_injected_faults(
    tmp_path: Path, ledger_at: str
) -> None:
    """Killed before its effect, after it (the file written, the ledger not yet), after the
    ledger, or raising: each triggering event's returned events land in one file, once."""
    program = compile_corpus(".decl reply(x: int);\nseen(x) := reply(x);\n", "replies.pomo")
    landing = tmp_path / "landing"
    ledger_path, effects = ledger_at, tmp_path / "effects.sqlite"
    open_ledger(ledger_path, "tests").close()
    events = _events(120)
    rng = random.Random(7)
    faults = 0
    for i in range(24):
        with closing(open_ledger(ledger_path, "tests")) as led:
            done = led.done([e.key for e in events])
        pending = [e for e in events if e.key not in done]
        if not pending:
            break
        point = (KILL_POINTS + RAISE_POINTS)[i % 5]
        target = rng.choice(pending[:8]).key
        emitter = Emitter(program, landing)
        if point in KILL_POINTS:
            handler = Emitting(effects, ledger_path)
            assert _run_in_child(events, ledger_path, handler, (point, target), emitter) == 3
        else:
            handler = Emitting(effects, ledger_path, (point, target))
            assert _run_in_child(events, ledger_path, handler, None, emitter) == 4
        faults += 1
    handler = Emitting(effects, ledger_path)
    assert _run_in_child(events, ledger_path, handler, None, Emitter(program, landing)) == 0
    files = sorted(landing.glob("_emitted-*.jsonl"))
    assert len(files) == len(events), "one file per triggering event"
    landed = sorted(
        json.loads(line)["args"][0] for f in files for line in f.read_text().splitlines()
    )
    assert landed == sorted(e.args["x"] for e in events), "each returned event landed once"
    assert all(generation(f) == 1 for f in files)
    assert not list(landing.glob(".emitting-*")), "no half-written file left behind"
    calls = handler.table("calls")
    print(f"faults {faults}, calls {len(calls)} for {len(events)} events")
    assert faults >= 5 and len(calls) <= len(events) + faults


def test_what_a_handler_cannot_emit_fails_its_event_and_loops_stop(tmp_path: Path) -> None:
    program = compile_corpus(".decl reply(x: int);\nseen(x) := reply(x);\n", "replies.pomo")
    event = _events(1)[0]
    emitter = Emitter(program, tmp_path)
    for returned, said in [
        (Emitted("seen", [1]), "which rules derive"),
        (Emitted("nothing", [1]), "no such relation"),
        (Emitted("reply", [1], event.t - 1), "before the event"),
        ("reply", "return Emitted"),
    ]:
        with pytest.raises(EmitError, match=said):
            emitter(event, returned)
    assert emitter(event, None) == 0 and emitter(event, []) == 0
    assert emitter(event, {"relation": "reply", "args": {"x": 2}}) == 1
    assert emitter(event, Emitted("reply", [3])) == 0, "landed once: the file is there"
    (landed,) = tmp_path.glob("_emitted-*.jsonl")
    assert json.loads(landed.read_text()) == {"relation": "reply", "t": event.t, "args": {"x": 2}}
    # A file of the last generation triggers nothing more; the events are counted.
    last = Emitter(program, tmp_path / "late", generation=MAX_GENERATION)
    assert last(event, [Emitted("reply", [1]), Emitted("reply", [2])]) == 0
    assert last.held_back == 2 and not (tmp_path / "late").exists()
    # A handler's invalid return is its event's failure, in the ledger and the report.
    with closing(open_ledger(tmp_path / "ledger.sqlite")) as led:
        report = run_actions(lambda e: Emitted("seen", [1]), [event], led, emit=emitter)
        assert [e.key for e, _ in report.failed] == [event.key]
        assert led.counts("h") == {"failed": 1}


def test_a_handler_s_events_land_and_a_later_run_derives_from_them(tmp_path: Path) -> None:
    """Through Dagster: the handler's returned events land as a landing file; the next
    partition's run reads it like any other, and the action reports what it landed."""
    from dagster import AssetKey, DagsterInstance, materialize

    from dagster_pomo.orchestration import pomo_definitions
    from tests.test_dagster_assets import KEYS, PARTITIONS, START

    corpus = tmp_path / "shop.pomo"
    corpus.write_text(
        ".decl order(id: str);\n.decl shipped(id: str);\n"
        "to_ship(id) ~ shipper := order(id) ^ !shipped(id);\n"
        "delivered(id) := shipped(id);\n"
    )
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "orders.jsonl").write_text(
        "".join(
            json.dumps({"relation": "order", "t": START + 60_000 * i, "args": [f"o{i}"]}) + "\n"
            for i in range(3)
        )
    )

    def shipper(event: ActionEvent) -> Emitted:  # shipped an hour after the order
        return Emitted("shipped", [event.args["c0"]], event.t + 3_600_000)

    warehouse = tmp_path / "warehouse"
    defs = pomo_definitions(
        corpus, PARTITIONS, str(warehouse), str(landing), handlers={"shipper": shipper}
    )
    home = tmp_path / "home"
    home.mkdir()
    instance = DagsterInstance.local_temp(str(home))
    assets = list(defs.assets)
    first = materialize(assets, instance=instance, resources=defs.resources, partition_key=KEYS[0])
    assert first.success
    emitted = sorted(landing.glob("_emitted-g1-shipper-*.jsonl"))
    assert len(emitted) == 3
    record = instance.get_latest_materialization_event(AssetKey(["shop", "action", "shipper"]))
    assert record.asset_materialization.metadata["pomo/events_emitted"].value == 3
    second = materialize(assets, instance=instance, resources=defs.resources, partition_key=KEYS[1])
    assert second.success
    program = compile_corpus(corpus.read_text(), "shop.pomo")
    from tests.test_dagster_assets import stored

    got = stored(program, warehouse, {"delivered"})["delivered"]
    assert sorted((args, t) for t, args, *_ in got) == [
        (("o0",), START + 3_600_000),
        (("o1",), START + 3_660_000),
        (("o2",), START + 3_720_000),
    ]
    # Run again, and backfill the range in one run: the ledger hands nothing over again,
    # and nothing more lands (the emitted events' own epoch triggers nothing: no order).
    again = materialize(assets, instance=instance, resources=defs.resources, partition_key=KEYS[0])
    assert again.success and sorted(landing.glob("_emitted-*.jsonl")) == emitted
    backfill = materialize(
        assets,
        instance=instance,
        resources=defs.resources,
        tags={
            "dagster/asset_partition_range_start": KEYS[0],
            "dagster/asset_partition_range_end": KEYS[-1],
        },
    )
    assert backfill.success and sorted(landing.glob("_emitted-*.jsonl")) == emitted
    with closing(open_ledger(warehouse / "shop" / "_actions.sqlite")) as led:
        assert led.counts("shipper") == {"done": 3}
