"""`pomo check` on large flat corpora, against clingo's grounder: ``python -m bench.check_scale``.

Each case is a fresh process, timed from its start to its exit, as a user waits for it:

- `pomo check` of N trivial rules (`rI(x) := a(x);`), of the same rules in PomoLogic
  (`rI(X) :- a(X).`), and of N broken ones (`rI(x) := a(x) ^;`, every error counted and
  the first hundred shown);
- the peer: clingo in grounder mode (`clingo --mode=gringo`, which parses, checks safety,
  orders the rules by their dependencies and grounds them) on the same N rules written in
  its language (`rI(X) :- a(X).`), with no facts, so that grounding makes nothing.

Each run's output is checked: pomo reports N rules (or N errors), clingo exits 0 and
grounds nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import harness

POMO = [sys.executable, "-m", "dagster_pomo.cli.main", "check"]
CLINGO = [sys.executable, "-m", "clingo", "--mode=gringo", "--text", "--warn=none"]


def _files(folder: Path, n: int) -> dict[str, Path]:
    texts = {
        "flat.pomo": "".join(f"r{i}(x) := a(x);\n" for i in range(n)),
        "flat.logic": "".join(f"r{i}(X) :- a(X).\n" for i in range(n)),
        "broken.pomo": "".join(f"r{i}(x) := a(x) ^;\n" for i in range(n)),
        "flat.lp": "".join(f"r{i}(X) :- a(X).\n" for i in range(n)),
    }
    paths = {}
    for name, text in texts.items():
        paths[name] = folder / name.replace(".logic", ".pomologic")
        paths[name].write_text(text)
    return paths


def _run(argv: list[str], expect: str, code: int) -> float:
    """Run ``argv`` to its exit, check what it said; its peak resident memory in MB."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        said = proc.stdout.read().decode() if proc.stdout else ""
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == code and expect in said, (argv, proc.returncode, said[-500:])
    return usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.check_scale", description=__doc__)
    parser.add_argument("--rules", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    measured = []
    with tempfile.TemporaryDirectory(prefix="pomo-check-") as tmp:
        for n in args.rules:
            folder = Path(tmp) / str(n)
            folder.mkdir()
            f = _files(folder, n)
            ok, broken = f"ok ({n} rules", f"{n} errors"
            cases = [
                (f"{n:,} rules", "dagster-pomo", [*POMO, str(f["flat.pomo"])], ok, 0),
                (f"{n:,} rules", "clingo --mode=gringo", [*CLINGO, str(f["flat.lp"])], "", 0),
                (f"{n:,} rules, PomoLogic", "dagster-pomo", [*POMO, str(f["flat.logic"])], ok, 0),
                (f"{n:,} broken rules", "dagster-pomo", [*POMO, str(f["broken.pomo"])], broken, 1),
            ]  # fmt: skip
            for case, system, command, expect, code in cases:
                peaks: list[float] = []
                m = harness.measure(
                    case,
                    system,
                    args.repeat,
                    lambda c=command, e=expect, k=code, p=peaks: p.append(_run(c, e, k)),
                )
                m.peak_mb = max(peaks)  # the process run, not this one
                measured.append(m)
    print()
    print(harness.table(measured))
    return 0


if __name__ == "__main__":
    sys.exit(main())
