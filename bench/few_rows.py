"""A recursion over few rows in an epoch too large for the process: the issue's counter (a
self-join on no shared variable, one row a round) beside a stratum of many readings.

Two fresh processes, each a whole `pomo run --out` timed from start to exit: as shipped
(the counter's rounds in the process, its relation holding few rows) and with every
recursion left to Spark's rounds (`Policy(lower_rows=-1, task_rows=0)`), the peer. Their outputs are
checked equal. With ``--cluster``, both run on a standalone cluster started here (two
one-core workers): the counter's rounds in the driver, its versions brought by Spark,
against Spark's rounds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from bench.standalone import on_cluster, standalone

CORPUS = """
.decl noise(x: int);
.decl c(x: int, n: int);
.decl seen(x: int);
c(0, {rounds});
c(x + 1, n) := c(x, _) ^ c(_, n) if x < n;
seen(x) := noise(x) if x < 3;
"""
RUN = """
import sys
from pathlib import Path
from dagster_pomo.engine.lines import ANY_TIME
from dagster_pomo.engine.policy import Policy
from dagster_pomo.engine.run import run
from dagster_pomo.lang import load_program
how = Policy() if sys.argv[4] == "here" else Policy(lower_rows=-1, task_rows=0)
run(load_program(Path(sys.argv[1])), sys.argv[2], 3_600_000, window=ANY_TIME, policy=how,
    out=Path(sys.argv[3]))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.few_rows", description=__doc__)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--readings", type=int, default=150_000)
    parser.add_argument("--cluster", action="store_true", help="on a standalone cluster")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pomo-few-") as tmp:
        work = Path(tmp)
        with standalone(work) if args.cluster else nullcontext("") as master:
            if master is None:
                print("the standalone cluster did not start")
                return 1
            return _compare(work, args.rounds, args.readings, master)


def _compare(work: Path, rounds: int, readings: int, master: str) -> int:
    """Both runs; ``master``: the cluster's URL, or "" for local mode."""
    env = on_cluster(master) if master else None
    corpus = work / "counter.pomo"
    corpus.write_text(CORPUS.format(rounds=rounds))
    events = work / "noise.jsonl"
    with open(events, "w") as handle:
        for i in range(readings):
            handle.write(json.dumps({"relation": "noise", "t": i, "args": [i % 7]}) + "\n")
    seconds, outputs = {}, {}
    for how in ("here", "spark"):
        out = work / how
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", RUN, str(corpus), str(events), str(out), how],
            check=True,
            capture_output=True,
            env=env,
        )
        seconds[how] = time.perf_counter() - began
        outputs[how] = {f.name: f.read_bytes() for f in sorted(out.glob("*.jsonl"))}
    where = f" on a standalone cluster ({master})" if master else ""
    print(f"the counter of {rounds:,} rounds beside {readings:,} readings{where}")
    print("| process | s |")
    print("| --- | ---: |")
    print(f"| `pomo run --out`, the counter's rounds in the process | {seconds['here']:.1f} |")
    print(f"| the same, every recursion on Spark's rounds | {seconds['spark']:.1f} |")
    if outputs["here"] != outputs["spark"]:
        print("the outputs differ")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
