"""Expression semantics in plain Python: the reference for every other evaluator.

Rules that keep evaluators in agreement: integer ``/`` and ``%`` truncate toward
zero (as on the JVM); division or remainder by zero, and operations on values of
the wrong type, are *undefined*: the match that needed the value does not happen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from dagster_pomo.lang import ast

Value = int | float | str | bool


class Undefined(Exception):
    """An expression has no value for this match (division by zero, wrong types)."""


def _number(v: Any) -> int | float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise Undefined(f"{v!r} is not a number")
    return v


def _int_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _arith(op: str, a: Any, b: Any) -> Value:
    """``a op b``; undefined where the result is no 64-bit integer or finite float."""
    x, y = _number(a), _number(b)
    if op == "+":
        return _fits(x + y)
    if op == "-":
        return _fits(x - y)
    if op == "*":
        return _fits(x * y)
    if y == 0:
        raise Undefined("division by zero")
    if isinstance(x, int) and isinstance(y, int):
        q = _int_div(x, y)
        return _fits(q if op == "/" else x - y * q)
    return _fits(x / y if op == "/" else math.fmod(x, y))


def _fits(v: int | float) -> int | float:
    """``v`` if a 64-bit column holds it: integers overflow, floats become infinite."""
    if isinstance(v, float):
        if not math.isfinite(v):
            raise Undefined("a float beyond 64 bits")
    elif not -(2**63) <= v < 2**63:
        raise Undefined("an integer beyond 64 bits")
    return v


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    return "str"


def _compare(op: str, a: Any, b: Any) -> bool:
    if _kind(a) != _kind(b):
        raise Undefined(f"cannot compare {a!r} with {b!r}")
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    return a >= b


def round_half_away(x: float) -> int:
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def to_text(v: Value) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _to_int(v: Any) -> int:
    if isinstance(v, bool):
        raise Undefined("a boolean is not a number")
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise Undefined("not a finite number")
        return _fits(int(v))
    try:
        return _fits(int(v))
    except ValueError:
        raise Undefined(f"{v!r} is not an integer") from None


def _to_float(v: Any) -> float:
    if isinstance(v, bool):
        raise Undefined("a boolean is not a number")
    try:
        return float(v)
    except ValueError:
        raise Undefined(f"{v!r} is not a number") from None


def _str_arg(v: Any) -> str:
    if not isinstance(v, str):
        raise Undefined(f"{v!r} is not a string")
    return v


FUNCTIONS: dict[str, Callable[..., Value]] = {
    "abs": lambda x: _fits(abs(_number(x))),
    "min": lambda *xs: min(_number(x) for x in xs),
    "max": lambda *xs: max(_number(x) for x in xs),
    "floor": lambda x: _fits(math.floor(_number(x))),
    "ceil": lambda x: _fits(math.ceil(_number(x))),
    "round": lambda x: _fits(round_half_away(_number(x))),
    "lower": lambda s: _str_arg(s).lower(),
    "upper": lambda s: _str_arg(s).upper(),
    "length": lambda s: len(_str_arg(s)),
    "concat": lambda *xs: "".join(to_text(x) for x in xs),
    "str": to_text,
    "int": _to_int,
    "float": _to_float,
}


def evaluate(expr: ast.Expr, env: Mapping[str, Value]) -> Value:
    """The value of ``expr`` under ``env``; raises :class:`Undefined` when it has none."""
    if isinstance(expr, ast.Const):
        return expr.value
    if isinstance(expr, ast.Var):
        return env[expr.name]
    if isinstance(expr, ast.Neg):
        return _fits(-_number(evaluate(expr.operand, env)))
    if isinstance(expr, ast.Call):
        return FUNCTIONS[expr.func](*(evaluate(a, env) for a in expr.args))
    if isinstance(expr, ast.BinOp):
        left, right = evaluate(expr.left, env), evaluate(expr.right, env)
        if expr.op in ast.COMPARISONS:
            return _compare(expr.op, left, right)
        return _arith(expr.op, left, right)
    raise Undefined("`_` has no value")


def holds(expr: ast.Expr, env: Mapping[str, Value]) -> bool:
    """A guard: true only if it evaluates to ``true``; undefined counts as false."""
    try:
        return evaluate(expr, env) is True
    except Undefined:
        return False
