"""Error messages are part of the interface: each bad corpus's full `pomo check` output
(stderr and exit code) is pinned by a golden file next to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_pomo.cli.main import main
from tests.conftest import GOLDEN

CASES = sorted([*(GOLDEN / "errors").glob("*.pomo"), *(GOLDEN / "errors").glob("*.pomologic")])


WARNED = sorted([*(GOLDEN / "warnings").glob("*.pomo"), *(GOLDEN / "warnings").glob("*.pomologic")])


@pytest.mark.parametrize(
    "corpus", [*CASES, *WARNED], ids=[f"{c.parent.name}/{c.stem}" for c in [*CASES, *WARNED]]
)
def test_check_output_matches_golden(corpus: Path, golden, capsys, monkeypatch) -> None:
    """A corpus with errors fails the check; one with warnings passes it, its warnings
    counted in the ok line. Either way every diagnostic is pinned by the golden file."""
    monkeypatch.chdir(corpus.parent)
    code = main(["check", corpus.name])
    out = capsys.readouterr()
    if corpus in CASES:
        assert code == 1, "a bad corpus must fail the check"
        assert out.out == "", "nothing goes to stdout for a failing corpus"
    else:
        assert code == 0, "warnings do not fail the check"
        n = out.err.count(f"{corpus.name}:")
        assert out.out.startswith(f"{corpus.name}: ok (")
        assert out.out.endswith(f"; {n} warning{'s' if n != 1 else ''})\n"), out.out
    golden.check(corpus.with_suffix(".expected"), out.err)


def test_every_error_line_names_file_line_and_column(capsys, monkeypatch) -> None:
    """Each diagnostic starts FILE:LINE:COL: and is followed by the source line and a caret."""
    for corpus in CASES:
        monkeypatch.chdir(corpus.parent)
        main(["check", corpus.name])
        lines = capsys.readouterr().err.splitlines()
        heads = [i for i, line in enumerate(lines) if line.startswith(corpus.name + ":")]
        diagnostics = [i for i in heads if lines[i].count(":") >= 3]
        assert diagnostics, corpus.name
        for i in diagnostics:
            _, line_no, col, _rest = lines[i].split(":", 3)
            source_line = corpus.read_bytes().decode("utf-8", "replace").splitlines()
            assert 1 <= int(line_no) <= max(1, len(source_line)), lines[i]
            caret = lines[i + 2]
            assert caret.strip() and set(caret.strip()) == {"^"}, lines[i : i + 3]
            assert caret.index("^") == 4 + int(col) - 1, lines[i : i + 3]


def test_at_least_fifteen_distinct_bad_corpora() -> None:
    messages = {(c.with_suffix(".expected")).read_text() for c in CASES}
    assert len(messages) == len(CASES) >= 15
