"""The `pomo check` and `pomo strata` commands as a user runs them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from dagster_pomo.cli.main import main
from dagster_pomo.lang import load_program
from tests.conftest import GOLDEN, ROOT, RULES

POMO = Path(sys.executable).with_name("pomo")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script, exactly as a user calls it."""
    return subprocess.run(
        [str(POMO), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_check_all_examples_succeeds() -> None:
    result = run("check", "rules/")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(list(RULES.glob("*.pomo")))
    assert all(": ok (" in line for line in result.stdout.splitlines())


def test_check_reports_errors_with_exit_1() -> None:
    result = run("check", "rules/water_tanks.pomo", "tests/golden/errors/arity_mismatch.pomo")
    assert result.returncode == 1
    assert "rules/water_tanks.pomo: ok" in result.stdout
    assert "arity_mismatch.pomo:2:9: `p` is used with 1 argument here" in result.stderr


def test_usage_errors_exit_2() -> None:
    assert run("check", "no/such/file.pomo").returncode == 2
    assert run("strata").returncode == 2
    assert run("frobnicate").returncode == 2


def test_warnings_do_not_fail_the_check(tmp_path: Path) -> None:
    corpus = tmp_path / "w.pomo"
    corpus.write_text("p(x) := q(x, y);\n")
    assert main(["check", str(corpus)]) == 0


def test_strata_text_lists_strata_in_evaluation_order(capsys) -> None:
    for path in sorted(RULES.glob("*.pomo")):
        assert main(["strata", str(path)]) == 0
        out = capsys.readouterr().out
        program = load_program(path)
        listed = re.findall(r"^stratum (\d+)[^:]*: (.*)$", out, flags=re.M)
        assert [(int(i), rels) for i, rels in listed] == [
            (s.index, ", ".join(s.relations)) for s in program.strata
        ]
        for stratum in program.strata:
            for rule in stratum.rules:
                assert f"{rule.span.line:>4}  " in out


def test_strata_dot_is_a_graph_of_every_relation_and_action(capsys) -> None:
    assert main(["strata", "--dot", str(RULES / "water_tanks.pomo")]) == 0
    dot = capsys.readouterr().out
    assert dot.startswith('digraph "water_tanks" {') and dot.rstrip().endswith("}")
    assert '"water_level" -> "level_10m" [style=dashed, label="agg"];' in dot
    assert '"high_minute" -> "overflow_alert" [style=solid];' in dot
    assert '"maintenance" -> "overflow_alert" [style=dashed, label="not"];' in dot
    assert '"was_high" -> "overflow_alert" [style=dashed, label="not"];' in dot
    assert '"overflow_alert" -> "~notify_operator";' in dot
    assert dot.count("{") == dot.count("}")


def test_strata_on_a_bad_corpus_prints_the_errors(capsys) -> None:
    assert main(["strata", str(GOLDEN / "errors" / "negative_cycle.pomo")]) == 1
    assert "cannot stratify" in capsys.readouterr().err


def test_the_wheel_ships_the_example_corpora_pomo_demo_runs(tmp_path: Path) -> None:
    """`pomo demo` runs the corpus shipped inside the package, so an installed wheel (not
    only a checkout) has what it needs; the checkout's `rules/` is the same folder."""
    import zipfile

    import dagster_pomo
    from dagster_pomo.cli.demo import CORPUS

    package = Path(dagster_pomo.__file__).resolve().parent
    assert CORPUS.is_file() and CORPUS.parent == package / "rules"
    assert (ROOT / "rules").resolve() == RULES.resolve() == package / "rules"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".pomo")}
    assert shipped == {f"dagster_pomo/rules/{p.name}" for p in RULES.glob("*.pomo")}
    assert len(shipped) == 4


# The `pomo` command as installed, run in a fresh interpreter, which then says what numpy
# and Arrow were set to: `engine.memory`'s choice, or the user's.
SETTLED = """
import sys
from importlib.metadata import entry_points

if sys.argv[1] == "imported":  # numpy and Arrow in the process before the command runs
    import numpy, pyarrow
(pomo,) = entry_points(group="console_scripts", name="pomo")
sys.argv = ["pomo", "check", sys.argv[2]]
code = pomo.load()()
import pyarrow
from numpy._core.multiarray import _set_madvise_hugepage
print(code, pyarrow.default_memory_pool().backend_name, _set_madvise_hugepage(True))
"""


def test_pomo_takes_memory_without_huge_pages_and_with_jemalloc_unless_the_user_chose() -> None:
    chose = ("NUMPY_MADVISE_HUGEPAGE", "ARROW_DEFAULT_MEMORY_POOL")
    clean = {k: v for k, v in os.environ.items() if k not in chose}
    corpus = str(RULES / "water_tanks.pomo")

    def settled(when: str, **env: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", SETTLED, when, corpus],
            capture_output=True,
            text=True,
            env={**clean, **env},
            check=True,
        )
        return done.stdout.split("\n")[-2]

    assert settled("fresh") == "0 jemalloc False"
    assert settled("imported") == "0 jemalloc False"  # set as far as it can be, then
    user = {"NUMPY_MADVISE_HUGEPAGE": "1", "ARROW_DEFAULT_MEMORY_POOL": "system"}
    assert settled("fresh", **user) == "0 system True"
