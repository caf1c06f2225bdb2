"""Which argument a recursive relation is spread on. A wrong answer would only cost speed,
never rows, but the answer decides whether a round of a long recursion moves data."""

from __future__ import annotations

import pytest

from dagster_pomo.lang import compile_corpus
from dagster_pomo.plan.partitioning import stable_argument

DECLS = ".decl edge(a: int, b: int);\n.decl path(a: int, b: int);\n"


def _recursive(rules: str):
    program = compile_corpus(DECLS + rules, "p.pomo")
    return next(s for s in program.strata if s.recursive)


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        # Right-linear closure keeps the start of the path.
        ("path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ edge(b, c);", 0),
        # Left-linear closure keeps its end.
        ("path(a, b) := edge(a, b);\npath(a, c) := edge(a, b) ^ path(b, c);", 1),
        # Doubling joins two paths: only the first's start reaches the head unchanged,
        # and the second path's start is not it.
        ("path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ path(b, c);", None),
        # Two recursive rules that keep different arguments share none.
        (
            "path(a, b) := edge(a, b);\n"
            "path(a, c) := path(a, b) ^ edge(b, c);\n"
            "path(a, c) := edge(a, b) ^ path(b, c);",
            None,
        ),
    ],
)
def test_the_argument_every_recursive_rule_passes_through(rules: str, expected) -> None:
    assert stable_argument(_recursive(rules), "path") == expected


def test_same_generation_has_no_stable_argument() -> None:
    program = compile_corpus(
        ".decl edge(a: int, b: int);\n.decl sg(a: int, b: int);\n"
        "sg(x, y) := edge(p, x) ^ edge(p, y) if x != y;\n"
        "sg(x, y) := edge(a, x) ^ sg(a, b) ^ edge(b, y);",
        "sg.pomo",
    )
    stratum = next(s for s in program.strata if s.recursive)
    assert stable_argument(stratum, "sg") is None
