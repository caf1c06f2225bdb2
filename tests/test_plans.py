"""Plans are part of the interface for people reading how a corpus runs: `pomo plan`'s
output for the example corpora and for one corpus per shape of rule (each join kind,
aggregates, negation, recursion linear or not, ``@next``, clocks) is pinned by golden
files, and the plan layer imports no engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_pomo.cli.main import main
from dagster_pomo.examples import CORPORA
from dagster_pomo.lang import compile_corpus
from dagster_pomo.plan.corpus import compile_plan
from dagster_pomo.plan.schema import infer_schemas
from tests.conftest import GOLDEN

SHAPES = sorted((GOLDEN / "plans").glob("*.pomo"))
EXAMPLES = sorted(CORPORA.glob("*.pomo"))


@pytest.mark.parametrize("corpus", [*EXAMPLES, *SHAPES], ids=[c.stem for c in [*EXAMPLES, *SHAPES]])
def test_plan_output_matches_golden(corpus: Path, golden, capsys) -> None:
    assert main(["plan", str(corpus)]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    expected = GOLDEN / "plans" / (("example_" if corpus in EXAMPLES else "") + corpus.stem)
    golden.check(expected.with_suffix(".plan"), out.out)


def test_a_bad_corpus_has_no_plan(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.pomo"
    bad.write_text("a(x) := b(y);\n")
    assert main(["plan", str(bad)]) == 1
    assert "bad.pomo:1:" in capsys.readouterr().err


def test_joins_are_decided_once_in_the_plan() -> None:
    """Each scan after the first says how it joins: on the variables it shares with the
    scans before it, on buckets of a band, or as a product; the executors follow it."""
    program = compile_corpus(
        ".decl a(x: int, y: int);\n.decl b(y: int, z: int);\n.decl c(w: int);\n"
        "r(x, z, w) := a(x, y) ^ b(y, z) ^ c(w) if w >= z ^ w <= z + 10;\n"
        "s(x, w) := a(x, _) ^ c(w) if x != w;\n",
        "joins",
    )
    plan = compile_plan(program, infer_schemas(program, {}))
    r, s = (next(rule for st in plan.strata for rule in st.own(n)) for n in ("r", "s"))
    kinds = [(scan.join.kind, scan.join.on) for scan in r.scans]
    assert kinds == [("first", ()), ("on", ("y",)), ("band", ())]
    band = r.scans[2].join.band
    assert band is not None and (band.left, band.right) == ("z", "w")
    assert [scan.join.kind for scan in s.scans] == ["first", "cross"]
