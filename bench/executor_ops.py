"""The local executor's operations as it runs them (numpy columns, `column_joins`: a sort
and a binary search; keys numbered first) against the same operations in pandas, in
pyarrow's compute (`Table.join`, `Table.group_by`) and in DuckDB over the same Arrow
tables, on the shapes the executor meets: a rule's join on a shared variable, the anti-join
of a negation, the de-duplication of versions (one per ``(args, t, kt)``, the longest
living), and a running aggregate's group-by. Each operation at a small size (an epoch
worked out in the process, a recursion's round) and a large one (W1's first round).
Every system's result is checked to hold as many rows as the others'.

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

from dagster_pomo.engine.local.column_joins import (
    among,
    groups,
    height,
    longest,
    pairs_on,
    row_codes,
    take,
)

Op = Callable[[], object]
SYSTEMS = ("column_joins", "pandas", "pyarrow", "DuckDB")


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
    cp, ce, cb = ({c: f[c].to_numpy() for c in f.columns} for f in (path, edge, blocked))

    def join_numpy() -> dict[str, np.ndarray]:
        mine, theirs = pairs_on([cp["b"]], [ce["b"]])
        return {**take(cp, mine), "c": ce["c"][theirs]}

    def longest_numpy() -> dict[str, np.ndarray]:
        merged = longest([cp[c] for c in key], cp["exp"], cp["kt"])
        if merged is None:
            return cp
        rows, exp, _ = merged
        return {**take({c: cp[c] for c in key}, rows), "exp": exp}

    def group_numpy() -> dict[str, np.ndarray]:
        order, starts = groups(row_codes([cp["a"], cp["t"]], height(cp)))
        b, exp = cp["b"][order], cp["exp"][order]
        first = order[starts]
        return {
            "a": cp["a"][first],
            "t": cp["t"][first],
            "n": np.diff(np.append(starts, len(order))),
            "s": np.add.reduceat(b, starts),
            "m": np.minimum.reduceat(exp, starts),
        }

    def anti_pandas() -> pd.DataFrame:
        both = path.merge(blocked.assign(__hit=True), on=["a", "b"], how="left", sort=False)
        return both[both["__hit"].isna()].drop(columns="__hit")

    return {
        "join on a shared variable": {
            "column_joins": join_numpy,
            "pandas": lambda: path.merge(edge, on="b", how="inner", sort=False),
            "pyarrow": lambda: tp.join(te, keys="b", join_type="inner"),
            "DuckDB": lambda: con.sql("SELECT * FROM path JOIN edge USING (b)").to_arrow_table(),
        },
        "anti-join (negation)": {
            "column_joins": lambda: take(cp, ~among([cp["a"], cp["b"]], [cb["a"], cb["b"]])),
            "pandas": anti_pandas,
            "pyarrow": lambda: tp.join(tb, keys=["a", "b"], join_type="left anti"),
            "DuckDB": lambda: con.sql(
                "SELECT * FROM path ANTI JOIN blocked USING (a, b)"
            ).to_arrow_table(),
        },
        "versions: longest per (args, t, kt)": {
            "column_joins": longest_numpy,
            "pandas": lambda: path.groupby(key, sort=False, as_index=False)["exp"].max(),
            "pyarrow": lambda: tp.group_by(key, use_threads=True).aggregate([("exp", "max")]),
            "DuckDB": lambda: con.sql(
                "SELECT a, b, t, kt, max(exp) AS exp FROM path GROUP BY ALL"
            ).to_arrow_table(),
        },
        "group-by: count, sum, min": {
            "column_joins": group_numpy,
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
    if isinstance(result, dict):
        return height(result)
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
    print(f"| operation | rows | {' | '.join(f'{s} ms' for s in SYSTEMS)} | best |")
    print(f"| --- | ---: | {' | '.join('---:' for _ in SYSTEMS)} | --- |")
    differ = False
    for size in args.sizes:
        for name, systems in _cases(_frames(size)).items():
            got = {s: _timed(op, args.repeat) for s, op in systems.items()}
            differ |= len({rows for _, rows in got.values()}) > 1
            best = min(got, key=lambda s: got[s][0])
            cells = " | ".join(f"{got[s][0] * 1000:.2f}" for s in SYSTEMS)
            print(f"| {name} | {size:,} | {cells} | {best} |", flush=True)
    if differ:
        print("the systems' results differ in size")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
