"""Loaded at start by every Python process of the UI tests' ``dagster dev`` (its folder is on
their ``PYTHONPATH``): Dagster's backfill daemon then ticks every ``POMO_DAEMON_TICK``
seconds rather than every 30.

The 30 seconds are a module constant Dagster offers no setting for, and a backfill of a
chain of runs waits a tick per run: minutes of a test spent asleep. What the daemon
launches and stores does not depend on when it ticks. The constant is set once its module
is loaded; a marker file written there (``POMO_DAEMON_TICK_MARK``) lets the test check that
it was, so that a Dagster release that moves it is seen rather than silently slow.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from pathlib import Path
from types import ModuleType

MODULE = "dagster._daemon.controller"


class _Tick(importlib.abc.MetaPathFinder):
    """Finds the daemon controller as the path finder does, and sets its interval once it
    has run."""

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            if not hasattr(module, "DEFAULT_DAEMON_INTERVAL_SECONDS"):
                return  # moved: no marker, and the test says so
            module.DEFAULT_DAEMON_INTERVAL_SECONDS = int(os.environ["POMO_DAEMON_TICK"])  # type: ignore[attr-defined]
            Path(os.environ["POMO_DAEMON_TICK_MARK"]).touch()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("POMO_DAEMON_TICK") and os.environ.get("POMO_DAEMON_TICK_MARK"):
    sys.meta_path.insert(0, _Tick())
