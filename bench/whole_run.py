"""What a user of `pomo run` waits for: a fresh process reading events, evaluating them and
writing its outputs, against a fresh DuckDB process doing the same with `WITH RECURSIVE`.

Transitive closure (W1's `tc`, the default) or same generation (`--program sg`) over a
random graph G(n, m), the edges landed as JSON Lines events. Five fresh processes, each
timed from its start to its exit:

- `pomo run FILE --events EDGES --out DIR`, as a user runs it (a small epoch is worked out
  in the process, and a relation of integers written from Arrow, with no JVM);
- the same run on Spark's plans and tasks, its outputs merged, sorted and written by
  Spark (what a larger epoch gets), for comparison;
- the same evaluation with every version collected and merged in Python one at a time
  before writing (how `--out` was written first);
- the first run again with numpy's and Arrow's own memory settings (transparent huge
  pages, mimalloc) in place of those `pomo` sets (`engine.memory`);
- DuckDB: read the events, `WITH RECURSIVE`, write the result as JSON Lines.

Each round runs the processes in a new random order (a process's speed here depends on
what the one before it left of the machine's memory). Each output is checked to hold
the same number of events as DuckDB's. The project's modules are compiled to bytecode
first, as installing a package does: a fresh process that compiled them from source on
every start (an editable install under `PYTHONDONTWRITEBYTECODE`) would be timed
compiling, not running.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster_pomo
from bench.w1_recursion import DUCK, PROGRAMS, gnp

COLLECTED = """
import sys
from pathlib import Path
from dagster_pomo.engine.run import run, write_outputs
from dagster_pomo.lang import load_program
from dagster_pomo.engine.lines import ANY_TIME
result = run(load_program(Path(sys.argv[1])), sys.argv[2], 3_600_000, window=ANY_TIME)
write_outputs(result, Path(sys.argv[3]))
"""
ON_SPARK = """
import sys
from pathlib import Path
from dagster_pomo.engine import event_lines
from dagster_pomo.engine.lines import ANY_TIME
from dagster_pomo.engine.policy import Policy
from dagster_pomo.engine.run import run
from dagster_pomo.engine.spark import warehouse
from dagster_pomo.lang import load_program
warehouse.LOCAL_ROWS, event_lines.ROWS = 0, -1  # Spark writes every relation
spark = Policy(in_process_inputs=0)
run(load_program(Path(sys.argv[1])), sys.argv[2], 3_600_000, window=ANY_TIME, policy=spark,
    out=Path(sys.argv[3]))
"""
DUCKDB = """
import sys, duckdb
con = duckdb.connect()
con.execute(
    "CREATE TABLE edge AS SELECT args[1]::BIGINT AS a, args[2]::BIGINT AS b "
    "FROM read_json(?, columns = {'relation': 'VARCHAR', 't': 'BIGINT', 'args': 'BIGINT[]'})",
    [sys.argv[1]],
)
con.execute("CREATE TABLE result AS " + sys.argv[3])
con.execute(
    "COPY (SELECT [a, b] AS args, 0 AS t, NULL AS exp FROM result ORDER BY a, b) "
    "TO '" + sys.argv[2] + "' (FORMAT JSON)"
)
"""


# What the libraries choose by themselves (see `dagster_pomo.engine.memory`).
LIBRARY_MEMORY = {"NUMPY_MADVISE_HUGEPAGE": "1", "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}


def _timed(command: list[str], env: dict[str, str] | None = None) -> float:
    began = time.perf_counter()
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})}
    )
    if done.returncode != 0:
        raise SystemExit(f"{command[:3]} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - began


def _lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.whole_run", description=__doc__)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--edges", type=int, default=8000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--program", choices=("tc", "sg"), default="tc")
    args = parser.parse_args(argv)
    compileall.compile_dir(Path(dagster_pomo.__file__).parent, quiet=1)
    python = sys.executable
    pomo = str(Path(python).with_name("pomo"))
    with tempfile.TemporaryDirectory(prefix="pomo-whole-") as tmp:
        work = Path(tmp)
        source, relation = PROGRAMS[args.program]
        written = f"{relation}.jsonl"
        corpus = work / f"{args.program}.pomo"
        corpus.write_text(source)
        events = work / "edges.jsonl"
        edges = gnp(args.nodes, args.edges, seed=1)
        events.write_text(
            "".join(
                json.dumps({"relation": "edge", "t": 0, "args": [a, b]}) + "\n" for a, b in edges
            )
        )
        pomo_run = [pomo, "run", str(corpus), "--events", str(events), "--times", "any"]
        # name: (command with the output's place last, its environment, the file written)
        processes = {
            "pomo run --out": (pomo_run + ["--out"], None, written),
            "the same, the libraries' memory settings": (
                pomo_run + ["--out"],
                LIBRARY_MEMORY,
                written,
            ),
            "on Spark": ([python, "-c", ON_SPARK, str(corpus), str(events)], None, written),
            "collected": ([python, "-c", COLLECTED, str(corpus), str(events)], None, written),
            "DuckDB": ([python, "-c", DUCKDB, str(events), DUCK[relation]], None, ""),
        }
        runs: dict[str, list[float]] = {name: [] for name in processes}
        counts: dict[str, int] = {}
        shuffle = random.Random(1)
        for i in range(args.repeat):
            order = list(processes)
            shuffle.shuffle(order)
            for name in order:
                command, env, output = processes[name]
                out = work / f"out{i}-{order.index(name)}"
                if name == "DuckDB":  # its script takes the file, then the query
                    command = [*command[:-1], str(out), command[-1]]
                else:
                    command = [*command, str(out)]
                runs[name].append(_timed(command, env))
                counts[name] = _lines(out / output if output else out)
    what = {"tc": "transitive closure", "sg": "same generation"}[args.program]
    print(f"{what} of G({args.nodes}, {args.edges}), {len(edges):,} edge events")
    duck_median = sorted(runs["DuckDB"])[len(runs["DuckDB"]) // 2]
    print("| process | median s | min–max s | / DuckDB | events written |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, seconds in runs.items():
        median = sorted(seconds)[len(seconds) // 2]
        print(
            f"| {name} | {median:.1f} | {min(seconds):.1f}–{max(seconds):.1f} | "
            f"{median / duck_median:.1f}x | {counts[name]:,} |"
        )
    if len(set(counts.values())) != 1:
        print(f"the outputs differ in size: {counts}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
