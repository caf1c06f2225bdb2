"""dagster-pomo: temporal Datalog rule corpora as partitioned Dagster assets on Spark.

The package has one direction of dependency: ``lang`` (syntax, checks, strata)
is used by the engine, which is used by the Dagster layer and the CLI. Importing
the top-level package stays cheap: it pulls in neither Spark nor Dagster.
"""

from __future__ import annotations

from dagster_pomo.engine.actions import ActionEvent, Listener
from dagster_pomo.engine.emit import Emitted
from dagster_pomo.errors import PomoError, UsageError
from dagster_pomo.lang import Program, compile_corpus, load_program
from dagster_pomo.lang.errors import CorpusError

__all__ = [
    "ActionEvent",
    "CorpusError",
    "Emitted",
    "Listener",
    "PomoError",
    "Program",
    "UsageError",
    "compile_corpus",
    "load_program",
]
__version__ = "0.1.0"
