"""The rule language: syntax, AST, checks and stratification.

This layer imports neither Spark nor Dagster; everything above it consumes the
:class:`Program` that :func:`compile_corpus` returns.
"""

from __future__ import annotations

from dagster_pomo.lang.catalog import Catalog, Relation
from dagster_pomo.lang.errors import (
    CorpusError,
    Diagnostic,
    PomoSyntaxError,
    Severity,
    StratificationError,
)
from dagster_pomo.lang.parser import parse
from dagster_pomo.lang.program import Program, compile_corpus, load_program
from dagster_pomo.lang.render import render
from dagster_pomo.lang.stratify import Stratum

__all__ = [
    "Catalog",
    "CorpusError",
    "Diagnostic",
    "PomoSyntaxError",
    "Program",
    "Relation",
    "Severity",
    "StratificationError",
    "Stratum",
    "compile_corpus",
    "load_program",
    "parse",
    "render",
]
