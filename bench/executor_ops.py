"""The local executor's operations in pandas (what it runs on) against the same operations
in pyarrow's compute (`Table.join`, `Table.group_by`) and in DuckDB over the same Arrow
tables, on the shapes the executor meets: a rule's join on a shared variable, the anti-join
of a negation, the de-duplication of versions (one per ``(args, t, kt)``, the longest
living), and a running aggregate's group-by. Each operation at a small size (an epoch
worked out in the process, a recursion's round) and a large one (W1's first round).
Every system's result is checked to hold the same rows as pandas'.

    python -m bench.executor_ops --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

Op = Callable[[], object]


def _frames(rows: int, seed: int = 1) -> dict[str, pd.DataFrame]:
    """A relation of pairs (``a``, ``b``, times), edges to join it with, and a relation
    to negate."""
    rng = np.random.default_rng(seed)
    nodes = max(rows // 4, 8)
    kt = rng.integers(0, 100, rows)
    path = pd.DataFrame(
        {
            "a": rng.integers(0, nodes, rows),
            "b": rng.integers(0, nodes, rows),
            "t": kt,
            "kt": kt,
            "exp": kt + rng.integers(1, 50, rows),
        }
    )
    edges = pd.DataFrame(
        {"b": rng.integers(0, nodes, rows // 4), "c": rng.integers(0, nodes, rows // 4)}
    )
    blocked = path.sample(frac=0.3, random_state=seed)[["a", "b"]].drop_duplicates()
    return {"path": path, "edge": edges, "blocked": blocked}


def _cases(frames: dict[str, pd.DataFrame]) -> dict[str, dict[str, Op]]:
    path, edge, blocked = frames["path"], frames["edge"], frames["blocked"]
    tables = {n: pa.Table.from_pandas(f, preserve_index=False) for n, f in frames.items()}
    tp, te, tb = tables["path"], tables["edge"], tables["blocked"]
    con = duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    key = ["a", "b", "t", "kt"]

    def anti_pandas() -> pd.DataFrame:
        both = path.merge(blocked.assign(__hit=True), on=["a", "b"], how="left", sort=False)
        return both[both["__hit"].isna()].drop(columns="__hit")

    return {
        "join on a shared variable": {
            "pandas": lambda: path.merge(edge, on="b", how="inner", sort=False),
            "pyarrow": lambda: tp.join(te, keys="b", join_type="inner"),
            "DuckDB": lambda: con.sql("SELECT * FROM path JOIN edge USING (b)").to_arrow_table(),
        },
        "anti-join (negation)": {
            "pandas": anti_pandas,
            "pyarrow": lambda: tp.join(tb, keys=["a", "b"], join_type="left anti"),
            "DuckDB": lambda: con.sql(
                "SELECT * FROM path ANTI JOIN blocked USING (a, b)"
            ).to_arrow_table(),
        },
        "versions: longest per (args, t, kt)": {
            "pandas": lambda: path.groupby(key, sort=False, as_index=False)["exp"].max(),
            "pyarrow": lambda: tp.group_by(key, use_threads=True).aggregate([("exp", "max")]),
            "DuckDB": lambda: con.sql(
                "SELECT a, b, t, kt, max(exp) AS exp FROM path GROUP BY ALL"
            ).to_arrow_table(),
        },
        "group-by: count, sum, min": {
            "pandas": lambda: path.groupby(["a", "t"], sort=False, as_index=False).agg(
                n=("b", "size"), s=("b", "sum"), m=("exp", "min")
            ),
            "pyarrow": lambda: tp.group_by(["a", "t"]).aggregate(
                [("b", "count"), ("b", "sum"), ("exp", "min")]
            ),
            "DuckDB": lambda: con.sql(
                "SELECT a, t, count(b), sum(b), min(exp) FROM path GROUP BY ALL"
            ).to_arrow_table(),
        },
    }


def _rows(result: object) -> int:
    return len(result) if isinstance(result, pd.DataFrame) else result.num_rows  # type: ignore[attr-defined]


def _timed(op: Op, repeat: int) -> tuple[float, int]:
    runs, rows = [], 0
    for _ in range(repeat):
        began = time.perf_counter()
        rows = _rows(op())
        runs.append(time.perf_counter() - began)
    return statistics.median(runs), rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.executor_ops", description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print("| operation | rows | pandas ms | pyarrow ms | DuckDB ms | best |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    differ = False
    for size in args.sizes:
        for name, systems in _cases(_frames(size)).items():
            got = {s: _timed(op, args.repeat) for s, op in systems.items()}
            differ |= len({rows for _, rows in got.values()}) > 1
            best = min(got, key=lambda s: got[s][0])
            cells = " | ".join(f"{got[s][0] * 1000:.2f}" for s in ("pandas", "pyarrow", "DuckDB"))
            print(f"| {name} | {size:,} | {cells} | {best} |", flush=True)
    if differ:
        print("the systems' results differ in size")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
