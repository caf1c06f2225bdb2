"""A process that hands events to a recording handler through the ledger, for the tests
that kill it with SIGKILL or run two of it at once: ``python -m tests.action_worker
LEDGER EFFECTS COUNT [SLEEP_S [PHASE]]``. PHASE: ``insert`` (the events, the default),
``withdraw`` (their withdrawals, to a handler told of them) or ``again`` (the events
derived again after their withdrawal), each keyed as `actions.current` says."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from dagster_pomo.engine.actions import (
    DELETE,
    ActionEvent,
    current,
    idempotency_key,
    open_ledger,
    run_actions,
)
from tests.test_actions import Recorder


def events(n: int) -> list[ActionEvent]:
    return [
        ActionEvent(idempotency_key("h", "r", (i,), 1000 + i), "h", "r", {"x": i}, 1000 + i, "0")
        for i in range(n)
    ]


def main() -> None:
    ledger, effects, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    record = Recorder(effects, ledger)

    def handler(event: ActionEvent) -> None:
        record(event)
        time.sleep(pause)

    phase = sys.argv[5] if len(sys.argv) > 5 else "insert"
    book = open_ledger(ledger, "tests")
    due = events(count)
    if phase == "withdraw":
        due = current(book, [], [replace(e, op=DELETE) for e in due])
    elif phase == "again":
        due = current(book, due, [])
    report = run_actions(handler, due, book, batch=32)
    book.close()
    print(f"ran={report.ran} skipped={report.skipped} held={report.held}")


if __name__ == "__main__":
    main()
