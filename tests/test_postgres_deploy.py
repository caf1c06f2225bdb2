"""Runs on several workers, as a deployment on several machines has them: a Dagster
instance whose storage is PostgreSQL (dagster-postgres), two run processes materializing
different partitions side by side, and one action ledger on the same server. Every event
is handed to its handler once, whichever process derives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from contextlib import closing
from pathlib import Path

from dagster_pomo.engine.actions import open_ledger
from tests.postgres import new_database
from tests.test_actions import _rising_tanks

DAGSTER = Path(sys.executable).with_name("dagster")
DEFS = """
import json
from pathlib import Path

from dagster_pomo.examples import CORPORA
from dagster_pomo.orchestration import pomo_definitions
from tests.test_dagster_assets import PARTITIONS

CALLS = Path({calls!r})


def record(event):
    # One line per call, not de-duplicated: a second call for one key would show.
    with CALLS.open("a") as out:
        line = [event.key, event.relation, list(event.args.values()), event.t]
        out.write(json.dumps(line) + "\\n")

corpus = CORPORA / "water_tanks.pomo"
defs = pomo_definitions(
    corpus, PARTITIONS, {warehouse!r}, {landing!r},
    handlers={{"notify_operator": record, "log_maintenance": record}},
    ledger={ledger!r},
)
"""


def test_two_run_processes_on_a_postgres_instance_share_the_ledger(
    tmp_path: Path, postgres: str
) -> None:
    from dagster import AssetKey, DagsterInstance

    from dagster_pomo.engine.run import run
    from dagster_pomo.examples import CORPORA, HOUR
    from dagster_pomo.lang import load_program
    from tests.compare import rounded
    from tests.conftest import ROOT
    from tests.test_dagster_assets import KEYS, START

    storage, ledger = new_database(postgres), new_database(postgres)
    home, landing, calls = tmp_path / "home", tmp_path / "landing", tmp_path / "calls.jsonl"
    for d in (home, landing):
        d.mkdir()
    # dagster-postgres speaks psycopg2 (SQLAlchemy's default driver is now psycopg 3).
    instance_url = storage.replace("postgresql://", "postgresql+psycopg2://")
    (home / "dagster.yaml").write_text(f"storage:\n  postgres:\n    postgres_url: {instance_url}\n")
    _rising_tanks(landing / "tanks.jsonl")
    defs = tmp_path / "defs.py"
    defs.write_text(
        DEFS.format(
            calls=str(calls), warehouse=str(tmp_path / "wh"), landing=str(landing), ledger=ledger
        )
    )
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT)}

    def materialize(*partition: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(DAGSTER), "asset", "materialize", "-f", str(defs), "--select", "*", *partition],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    # A deployment's storage exists before its runs start (its webserver, daemon or
    # `dagster instance migrate` makes it): two run processes making it at once race in
    # PostgreSQL (`type "jobs" already exists`).
    DagsterInstance.from_config(str(home)).dispose()
    side_by_side = [materialize("--partition", key) for key in KEYS[:2]]
    for process in side_by_side:
        said = process.communicate(timeout=900)[0]
        assert process.returncode == 0, said[-4000:]
    instance = DagsterInstance.from_config(str(home))
    alerts = AssetKey(["water_tanks", "action", "notify_operator"])
    assert instance.get_materialized_partitions(alerts) == set(KEYS[:2]), "kept in PostgreSQL"
    instance.dispose()
    before = calls.read_text().splitlines()
    assert before, "the first two hours have alerts"
    # Then all three hours in one run: what the two runs handed over is not handed again.
    last = materialize("--partition-range", f"{KEYS[0]}...{KEYS[2]}")
    assert last.wait(timeout=900) == 0, last.stdout.read()[-4000:]  # type: ignore[union-attr]

    handed = [json.loads(line) for line in calls.read_text().splitlines()]
    assert len(handed) == len(before) + sum(t >= START + 2 * HOUR for *_, t in handed)
    keys = Counter(k for k, *_ in handed)
    assert max(keys.values()) == 1, f"handed over twice: {keys.most_common(3)}"
    program = load_program(CORPORA / "water_tanks.pomo")
    result = run(program, landing, HOUR, start=START, until=START + 3 * HOUR, engine="reference")
    want = {("overflow_alert", rounded(r.args), r.t) for r in result.events("overflow_alert")}
    want |= {("maintenance", ("north", "pump swap"), START + 150 * 60_000)}
    got = {(relation, rounded(tuple(args)), t) for _, relation, args, t in handed}
    assert got == want and len(want) > 10
    with closing(open_ledger(ledger, "water_tanks")) as led:
        assert led.counts() == {"done": len(handed)}
