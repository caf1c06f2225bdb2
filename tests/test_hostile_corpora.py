"""Hostile corpora: mutated example corpora and deep or huge structures get located errors
(file, line, column, a caret), bounded output and no traceback, quickly."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dagster_pomo.errors import UsageError
from dagster_pomo.lang import CorpusError, compile_corpus
from dagster_pomo.lang.errors import SHOWN
from tests.conftest import RULES

MUTATIONS = 1_200
PIECES = list(":=^!@~;,()_\"#/.-+*<>=0123456789 \nabcxyzXT") + [
    ":=", "@time(t)", "@next", "@count", "@sum(x)", "!", "if", "where", ".decl", "lifetime",
    "clock(0, 1m)", "~ h", "1e400", "99999999999999999999", '"\\ud800"', "_x", "1 / 0",
]  # fmt: skip


def _mutate(text: str, rng: random.Random) -> str:
    """One to three edits: delete, insert, duplicate or swap pieces of the text."""
    for _ in range(rng.randint(1, 3)):
        i, j = sorted(rng.randrange(len(text) + 1) for _ in range(2))
        kind = rng.randrange(4)
        if kind == 0:
            text = text[:i] + text[j : j + rng.randint(0, 3)] + text[j:]
        elif kind == 1:
            text = text[:i] + rng.choice(PIECES) + text[i:]
        elif kind == 2:
            text = text[:i] + text[i:j] + text[i:]
        else:
            text = text[:i] + text[j:]
    return text


def _outcome(text: str) -> str:
    """Check ``text``: every error is located inside the text and renders bounded."""
    try:
        program = compile_corpus(text, "mutant.pomo")
    except CorpusError as exc:
        assert exc.diagnostics
        for d in exc.diagnostics:
            assert 1 <= d.span.line <= text.count("\n") + 1
            assert 0 <= d.span.start <= d.span.end <= len(text)
        shown = exc.render()
        assert shown.count("\n") <= SHOWN * 5 + 1
        assert all(len(line) <= 400 for line in shown.splitlines()), "long lines are cut"
        return "error"
    except UsageError:
        return "usage"
    for warning in program.warnings:
        assert len(warning.render(program.source).splitlines()[1]) <= 110
    return "ok"


def test_a_thousand_mutated_corpora_get_located_errors_only() -> None:
    rng = random.Random(35)
    originals = [p.read_text() for p in sorted(RULES.glob("*.pomo"))]
    outcomes: dict[str, int] = {}
    slowest = 0.0  # reported, not asserted: no timing thresholds in tests
    for _ in range(MUTATIONS):
        started = time.perf_counter()
        outcome = _outcome(_mutate(rng.choice(originals), rng))
        slowest = max(slowest, time.perf_counter() - started)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("error", 0) > MUTATIONS // 3 and outcomes.get("ok", 0) > 10, outcomes
    print(f"{outcomes}; the slowest corpus took {slowest:.2f} s to check")


DEEP = {
    "a + chain of 500 terms": "r(x) := a(x) if x < " + " + ".join(["1"] * 500) + ";",
    "1,000 nested minuses": "r(x) := a(x) if x < " + "-" * 1000 + "1;",
    "1,000 nested calls": "r(x) := a(x) if x < " + "abs(" * 1000 + "1" + ")" * 1000 + ";",
    "a 2,000-factor product": "r(x) := a(x) if x < " + " * ".join(["2"] * 2000) + ";",
    "a 100,000-digit integer": "r(x) := a(x) if x < " + "9" * 100_000 + ";",
    "a 100,000-digit float": "r(x) := a(x) if x < 1." + "9" * 100_000 + "e99999;",
    "a 1,000-atom body": "r(x) := " + " ^ ".join(f"a{i}(x)" for i in range(1000)) + ";",
    "100,000 semicolons": ";" * 100_000,
    "a lone surrogate": 'r("\\udc00");',
    "a reserved name": "_quarantine(x) := a(x);",
    "a 300-character name": "r(x) := " + "a" * 300 + "(x);",
    "an int64 overflow in a duration": "r(x) := a(x) @time(t) if t < 99999999999999999d;",
}


@pytest.mark.parametrize("text", list(DEEP.values()), ids=list(DEEP))
def test_deep_and_huge_statements_are_located_errors(text: str, tmp_path: Path) -> None:
    corpus = tmp_path / "deep.pomo"
    corpus.write_text(text)
    done = subprocess.run(  # a hang fails by the timeout
        [sys.executable, "-m", "dagster_pomo.cli.main", "check", str(corpus)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr[-500:]
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"{corpus}:1:"), first
    assert len(done.stderr) < 50_000, "the output is bounded, whatever the size of the file"


def test_many_warnings_are_counted_not_all_printed(tmp_path: Path) -> None:
    corpus = tmp_path / "singles.pomo"
    corpus.write_text("r(x) := a(x, " + ", ".join(f"v{i}" for i in range(5000)) + ");")
    done = subprocess.run(
        [sys.executable, "-m", "dagster_pomo.cli.main", "check", str(corpus)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert f"... and {5000 - SHOWN:,} more warnings not shown" in done.stderr
    assert "(1 rule, 2 relations, 1 stratum; 5000 warnings)" in done.stdout


def test_a_file_whose_name_cannot_name_a_corpus_is_refused(tmp_path: Path) -> None:
    corpus = tmp_path / "..pomo"
    corpus.write_text("r(x) := a(x);")
    done = subprocess.run(
        [sys.executable, "-m", "dagster_pomo.cli.main", "check", str(corpus)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "cannot name a corpus" in done.stderr
