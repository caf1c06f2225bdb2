"""W1: recursion. Transitive closure and same generation over random graphs, a cycle and a
grid, against DuckDB's ``WITH RECURSIVE ... UNION`` on the same edges.

Edges are events at time 0 that never expire, evaluated in one epoch. dagster-pomo's time
covers the evaluation of that epoch on Spark (its derived relation written to the Parquet
warehouse); DuckDB's covers the recursive query materialized into a table. Ingesting the
edges is set-up for both. Every run's output is checked equal to DuckDB's, row for row,
by DuckDB reading the warehouse's Parquet files.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.harness import Measurement, measure

TC = """
.decl edge(a: int, b: int);
.decl path(a: int, b: int);
path(a, b) := edge(a, b);
path(a, c) := path(a, b) ^ edge(b, c);
"""
SG = """
.decl edge(a: int, b: int);
.decl sg(a: int, b: int);
sg(x, y) := edge(p, x) ^ edge(p, y) if x != y;
sg(x, y) := edge(a, x) ^ sg(a, b) ^ edge(b, y);
"""
# The closure again, non-linear: each round joins the relation with itself (rounds grow
# with the log of the longest path, each joining far more rows).
NL = """
.decl edge(a: int, b: int);
.decl path(a: int, b: int);
path(a, b) := edge(a, b);
path(a, c) := path(a, b) ^ path(b, c);
"""
# A counter whose rule joins its relation with itself on no shared variable: one new row a
# round, a thousand rounds (the graph is not read).
COUNTER = """
.decl c(a: int, b: int);
c(0, 1000);
c(a + 1, b) := c(a, _) ^ c(_, b) if a < b;
"""
DUCK = {
    "path": """
        WITH RECURSIVE path(a, b) AS (
            SELECT a, b FROM edge
            UNION
            SELECT path.a, edge.b FROM path JOIN edge ON path.b = edge.a
        ) SELECT * FROM path""",
    "sg": """
        WITH RECURSIVE sg(a, b) AS (
            SELECT e1.b, e2.b FROM edge e1 JOIN edge e2 ON e1.a = e2.a WHERE e1.b <> e2.b
            UNION
            SELECT e1.b, e2.b FROM sg JOIN edge e1 ON e1.a = sg.a JOIN edge e2 ON e2.a = sg.b
        ) SELECT * FROM sg""",
    "c": """
        WITH RECURSIVE c(a, b) AS (
            SELECT 0, 1000
            UNION
            SELECT a + 1, b FROM c WHERE a < b
        ) SELECT * FROM c""",
}
PROGRAMS = {"tc": (TC, "path"), "sg": (SG, "sg"), "nl": (NL, "path"), "counter": (COUNTER, "c")}
# Programs run on some graphs only: the non-linear closure of a dense random graph joins
# millions of paths with millions, and the counter does not read the graph at all.
ONLY_ON = {"nl": ("chain",), "counter": ("chain",)}

Edges = list[tuple[int, int]]

if TYPE_CHECKING:
    from dagster_pomo.engine.policy import Policy


def gnp(nodes: int, edges: int, seed: int) -> Edges:
    """``edges`` distinct directed edges between random distinct nodes."""
    rng = random.Random(seed)
    out: set[tuple[int, int]] = set()
    while len(out) < edges:
        a, b = rng.randrange(nodes), rng.randrange(nodes)
        if a != b:
            out.add((a, b))
    return sorted(out)


def cycle(nodes: int) -> Edges:
    return [(i, (i + 1) % nodes) for i in range(nodes)]


def chain(nodes: int) -> Edges:
    """A directed path: the closure takes as many rounds as it has nodes."""
    return [(i, i + 1) for i in range(nodes - 1)]


def grid(side: int) -> Edges:
    """Edges right and down in a ``side`` x ``side`` grid."""
    out = []
    for r in range(side):
        for c in range(side):
            here = r * side + c
            if c + 1 < side:
                out.append((here, here + 1))
            if r + 1 < side:
                out.append((here, here + side))
    return out


@dataclass(frozen=True)
class Graph:
    name: str
    make: Callable[[], Edges]


def graphs(scale: float) -> list[Graph]:
    """The four graphs of W1; ``scale`` shrinks them for a quick run (1 = the published sizes)."""

    def n(x: int) -> int:
        return max(4, int(x * scale))

    side = max(3, int(50 * scale**0.5))
    return [
        Graph(f"gnp({n(1000)},{n(2000)})", lambda: gnp(n(1000), n(2000), seed=1)),
        Graph(f"gnp({n(2000)},{n(8000)})", lambda: gnp(n(2000), n(8000), seed=2)),
        Graph(f"cycle({n(1000)})", lambda: cycle(n(1000))),
        Graph(f"grid({side}x{side})", lambda: grid(side)),
        Graph(f"chain({n(1000)})", lambda: chain(n(1000))),
    ]


def run(
    repeat: int,
    scale: float,
    programs: list[str],
    only: list[str] | None = None,
    policy: Policy | None = None,
) -> list[Measurement]:
    import duckdb

    out: list[Measurement] = []
    for graph in graphs(scale):
        if only and not any(o in graph.name for o in only):
            continue
        edges = graph.make()
        with tempfile.TemporaryDirectory(prefix="pomo-bench-w1-") as tmp:
            landing = Path(tmp) / "edges.jsonl"
            landing.write_text(
                "".join(
                    json.dumps({"relation": "edge", "t": 0, "args": [a, b]}) + "\n"
                    for a, b in edges
                )
            )
            con = duckdb.connect()
            con.execute("CREATE TABLE edge (a INTEGER, b INTEGER)")
            con.executemany("INSERT INTO edge VALUES (?, ?)", edges)
            for key in programs:
                if key in ONLY_ON and not graph.name.startswith(ONLY_ON[key]):
                    continue
                work = Path(tmp) / key
                out += _case(f"{key} {graph.name}", key, repeat, con, landing, work, policy)
            con.close()
    return out


def _case(
    case: str,
    key: str,
    repeat: int,
    con,
    landing: Path,
    work: Path,  # noqa: ANN001
    policy: Policy | None,
) -> list[Measurement]:
    """One program on one graph: DuckDB, then dagster-pomo checked against it."""
    from dagster_pomo.engine.driver import Driver
    from dagster_pomo.engine.inputs import prepare
    from dagster_pomo.engine.lines import ANY_TIME
    from dagster_pomo.engine.policy import Policy
    from dagster_pomo.engine.spark.session import spark_session
    from dagster_pomo.lang import compile_corpus

    spark = spark_session()
    text, relation = PROGRAMS[key]
    program = compile_corpus(text, f"{key}.pomo", key)
    prepared = prepare(program, landing, 3_600_000, start=0, until=3_600_000, window=ANY_TIME)
    (epoch,) = prepared.epoch_range.epochs
    runs = iter(range(repeat))

    def duck() -> dict:
        con.execute(f"CREATE OR REPLACE TABLE result AS {DUCK[relation]}")
        (rows,) = con.execute("SELECT count(*) FROM result").fetchone()
        return {"rows": rows}

    def pomo() -> dict:
        warehouse = f"{work}/wh{next(runs)}"
        evaluator = Driver.for_run(
            program, prepared, warehouse, policy=policy or Policy(), session=spark
        )
        stats = evaluator.evaluate_epoch(epoch)
        rounds = max(s.rounds for s in stats.strata)
        wrong = _differences(con, f"{warehouse}/{program.name}/{relation}")
        if wrong:
            raise AssertionError(f"{case}: {wrong} rows differ from DuckDB's")
        return {
            "seconds": stats.seconds,  # the evaluation, not setting up a fresh warehouse
            "rows": stats.strata[-1].rows[relation],
            "rounds": rounds,
            "spark_jobs": stats.spark_jobs,
            "jobs_per_round": round(stats.spark_jobs / rounds, 1),
        }

    return [
        measure(case, "DuckDB WITH RECURSIVE", repeat, duck),
        measure(case, "dagster-pomo", repeat, pomo),
    ]


def _differences(con, folder: str) -> int:  # noqa: ANN001
    """Rows in one result and not the other (0 when equal as sets)."""
    (n,) = con.execute(
        f"""SELECT (SELECT count(*) FROM (
                SELECT a, b FROM read_parquet('{folder}/**/*.parquet') EXCEPT SELECT * FROM result))
             + (SELECT count(*) FROM (
                SELECT * FROM result EXCEPT SELECT a, b FROM read_parquet('{folder}/**/*.parquet')))
        """
    ).fetchone()
    return int(n)
