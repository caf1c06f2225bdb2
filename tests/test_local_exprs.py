"""Expressions worked out over numpy columns (small epochs in this process) against the
reference semantics of `values.evaluate`, row by row, on generated expressions and rows."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dagster_pomo.engine.local.exprs import Col, truthy, value
from dagster_pomo.lang import ast
from dagster_pomo.lang.interpret import Undefined, evaluate
from dagster_pomo.plan.exprs import lower

TYPES = {"i": "int", "j": "int", "f": "float", "s": "str", "b": "bool"}
FUNCTIONS = {
    "abs": 1,
    "min": 2,
    "max": 2,
    "floor": 1,
    "ceil": 1,
    "round": 1,
    "lower": 1,
    "upper": 1,
    "length": 1,
    "concat": 2,
    "str": 1,
    "int": 1,
    "float": 1,
}
OPS = ("+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=")

constants = st.one_of(
    st.integers(-7, 7).map(lambda v: ast.Const(v, "int")),
    st.sampled_from([-2.5, -0.5, 0.0, 0.5, 1.25, 3.0]).map(lambda v: ast.Const(v, "float")),
    st.sampled_from(["", "a", "Ab"]).map(lambda v: ast.Const(v, "str")),
    st.booleans().map(lambda v: ast.Const(v, "bool")),
)
leaves = st.one_of(st.sampled_from(sorted(TYPES)).map(ast.Var), constants)


def _extend(children: st.SearchStrategy[ast.Expr]) -> st.SearchStrategy[ast.Expr]:
    binops = st.builds(ast.BinOp, st.sampled_from(OPS), children, children)
    negs = st.builds(ast.Neg, children)
    calls = st.sampled_from(sorted(FUNCTIONS)).flatmap(
        lambda f: st.tuples(*[children] * FUNCTIONS[f]).map(lambda args: ast.Call(f, args))
    )
    return st.one_of(binops, negs, calls)


expressions = st.recursive(leaves, _extend, max_leaves=6)
rows = st.lists(
    st.fixed_dictionaries(
        {
            "i": st.integers(-9, 9),
            "j": st.integers(-3, 3),
            "f": st.sampled_from([-3.75, -1.0, -0.5, 0.0, 0.25, 0.5, 2.5, 7.0, 1e20, 1.5e-7]),
            # text that reads as a number one way or another (as Python's int and float do)
            "s": st.sampled_from(["", "x", "Yz", "ab c", "12", " -3 ", "1_000", "2.5", "1e3"]),
            "b": st.booleans(),
        }
    ),
    min_size=1,
    max_size=12,
)


def _same(expected: object, got: object) -> bool:
    if isinstance(expected, float) or isinstance(got, float):
        return isinstance(got, float) and math.isclose(expected, got, rel_tol=1e-12)  # type: ignore[arg-type]
    return type(expected) is type(got) and expected == got


def _columns(data: list[dict]) -> dict[str, np.ndarray]:
    """Rows as the executor holds them: a numpy column per name."""
    frame = pd.DataFrame(data)
    return {name: frame[name].to_numpy() for name in frame.columns}


@settings(max_examples=400, deadline=None)
@given(expressions, rows)
# An undefined argument makes min and max undefined (Spark's least would skip it).
@example(
    ast.Call("min", (ast.BinOp("/", ast.Var("i"), ast.Var("j")), ast.Const(2, "int"))),
    [{"i": 1, "j": 0, "f": 0.0, "s": "", "b": True}],
)
# A float's integer beyond 64 bits is undefined (numpy and the JVM would saturate it).
@example(ast.Call("ceil", (ast.Var("f"),)), [{"i": 0, "j": 0, "f": 1e20, "s": "", "b": False}])
def test_columns_give_what_the_reference_gives_row_by_row(expr: ast.Expr, data: list) -> None:
    env = {name: Col(name, typ) for name, typ in TYPES.items()}
    vec = value(lower(expr, TYPES), _columns(data), env)
    ok = vec.valid()
    for k, row in enumerate(data):
        try:
            expected = evaluate(expr, row)
        except Undefined:
            assert not ok[k], (row, vec.values[k])
            continue
        assert ok[k], (row, expected)
        got = vec.values[k]
        got = got.item() if isinstance(got, np.generic) else got
        assert _same(expected, got), (row, expected, got)


@given(expressions, rows)
def test_a_guard_holds_where_the_reference_says_true(expr: ast.Expr, data: list) -> None:
    env = {n: Col(n, t) for n, t in TYPES.items()}
    holds = truthy(value(lower(expr, TYPES), _columns(data), env))
    for k, row in enumerate(data):
        try:
            expected = evaluate(expr, row) is True
        except Undefined:
            expected = False
        assert holds[k] == expected, row


edges = st.one_of(
    st.sampled_from([0, 1, -1, 3, 2**62, 2**63 - 1, -(2**63)]).map(lambda v: ast.Const(v, "int")),
    st.sampled_from([0.0, 2.0, 1e308, -1e308, 1e-300]).map(lambda v: ast.Const(v, "float")),
    st.sampled_from(["i", "f"]).map(ast.Var),
)


@settings(max_examples=300, deadline=None)
@given(
    st.builds(ast.BinOp, st.sampled_from(("+", "-", "*", "/", "%")), edges, edges),
    st.lists(
        st.fixed_dictionaries(
            {
                "i": st.sampled_from([0, 2, -3, 2**62, 2**63 - 1, -(2**63)]),
                "j": st.just(1),
                "f": st.sampled_from([0.5, 1e308, -1e308]),
                "s": st.just(""),
                "b": st.just(True),
            }
        ),
        min_size=1,
        max_size=6,
    ),
)
@example(  # the one integer quotient beyond 64 bits
    ast.BinOp("/", ast.Const(-(2**63), "int"), ast.Const(-1, "int")),
    [{"i": 0, "j": 1, "f": 0.5, "s": "", "b": True}],
)
def test_arithmetic_at_the_edges_of_64_bits_is_undefined_as_in_the_reference(
    expr: ast.Expr, data: list
) -> None:
    """An integer result beyond 64 bits or an infinite float is undefined in this process
    as in the reference (numpy would wrap the integer around)."""
    test_columns_give_what_the_reference_gives_row_by_row.hypothesis.inner_test(expr, data)
