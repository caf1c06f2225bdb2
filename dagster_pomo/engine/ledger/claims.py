"""Who holds a claim on an action, and whether it may be taken: the rule both ledgers
follow (`sqlite.SqliteLedger`, `postgres.PostgresLedger`)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Sequence
from enum import Enum
from typing import Self

from dagster_pomo.engine.cid import cid
from dagster_pomo.lang.interpret import Value

LEASE = 600.0  # seconds a claim holds without renewal (renewed while its batch runs)
HOST = socket.gethostname()


class Verdict(Enum):
    """What a claim finds for one key."""

    FREE = "free"  # new, failed, released, or its owner is gone: hand it over
    DONE = "done"  # finished before: never again
    HELD = "held"  # a live owner's claim: that owner hands it over


def idempotency_key(handler: str, relation: str, args: Sequence[Value], t: int) -> str:
    """The key of an action: the handler's name and the event's content ID, the ID a rule
    binds with ``C := relation(...)`` (`engine/cid.py`), once for each handler it is handed
    to."""
    return f"{handler}:{cid(relation, args, t)}"


def new_owner() -> str:
    """Who claims: this host, this process and this call (``host:pid:token``)."""
    return f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def owner_alive(owner: str | None) -> bool:
    """Whether ``owner``'s process may still be running: a process of this host that no
    longer exists is dead; of another host, only its lease can tell."""
    if not owner:
        return False
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != HOST or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def verdict(
    state: str | None, holder: str | None, until: float | None, owner: str, now: float
) -> Verdict:
    """The rule of a claim on a key the ledger records as ``state`` (``None``: never seen),
    claimed by ``holder`` until ``until``, when ``owner`` asks at ``now``."""
    if state == "done":
        return Verdict.DONE
    if state == "started" and holder != owner and (until or 0) > now and owner_alive(holder):
        return Verdict.HELD
    return Verdict.FREE


class Closes:
    """A ledger in a ``with`` block is closed at its end."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
