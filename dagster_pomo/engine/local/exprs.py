"""Rule expressions over numpy columns, with the semantics of the Spark plans.

A column is a :class:`Vec`: its values, which rows have one (``ok``; None when all
do) and its static type. Where :mod:`dagster_pomo.engine.spark.exprs` compiles a typed
expression (`plan.exprs`) into a Spark column, :func:`value` works it out for
every row of a frame at once, one numpy operation per operation; an undefined value
(null for Spark) is a row whose ``ok`` is false. Text read as a number goes through the
language's own function, one value at a time, as Spark's Python workers do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from dagster_pomo.engine.local.column_joins import height
from dagster_pomo.lang.interpret import FUNCTIONS, Undefined, Value
from dagster_pomo.plan.exprs import (
    Apply,
    Arith,
    Arithmetic,
    Cmp,
    Compare,
    Convert,
    Expr,
    Fn,
    Literal,
    Negate,
    Nothing,
    Var,
)

NUMPY = {"int": np.int64, "float": np.float64, "str": object, "bool": np.bool_}
LONG_MAX = np.iinfo(np.int64).max
LONG_MIN = np.iinfo(np.int64).min


@dataclass(frozen=True)
class Vec:
    values: np.ndarray
    ok: np.ndarray | None  # None: every row has a value
    typ: str | None  # None: no row has one (an operation on the wrong types)

    def valid(self) -> np.ndarray:
        return np.ones(len(self.values), dtype=bool) if self.ok is None else self.ok


@dataclass(frozen=True)
class Col:
    """Where a variable's values are in a frame: its column, type, and the column telling
    which rows have one (None when all do)."""

    column: str
    typ: str
    ok: str | None = None


Env = Mapping[str, Col]


def _both(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return b
    return a if b is None else a & b


def nothing(n: int, typ: str = "bool") -> Vec:
    return Vec(np.zeros(n, dtype=NUMPY[typ]), np.zeros(n, dtype=bool), None)


def to_float(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float64)


def to_long(values: np.ndarray) -> np.ndarray:
    """A double as a long as the JVM casts it: toward zero, NaN as 0, the ends saturated."""
    if values.dtype.kind != "f":
        return values.astype(np.int64)
    clipped = np.clip(np.nan_to_num(values, nan=0.0), -(2.0**63), 2.0**63)
    out = np.trunc(clipped)
    big = out >= 2.0**63
    result = np.where(big, 0, out).astype(np.int64)
    result[big] = LONG_MAX
    return result


def _negates(vec: Vec) -> np.ndarray | None:
    """Where ``-vec`` (and so ``abs``) is defined: every float; every integer but the least,
    whose negation leaves 64 bits (numpy and the JVM would give it back unchanged)."""
    return vec.values != LONG_MIN if vec.typ == "int" else None


def in_long_range(values: np.ndarray) -> np.ndarray:
    """Where a float's integer (toward zero, down, up or rounded) fits in 64 bits: the
    floats in [-2**63, 2**63), the others' integer is undefined (`interpret._fits`)."""
    return (values >= -(2.0**63)) & (values < 2.0**63)


def cast(vec: Vec, typ: str) -> Vec:
    """``vec`` in a column of type ``typ`` (a number into int or float, anything else as is)."""
    if vec.typ is None:
        return nothing(len(vec.values), typ)
    if typ == "float" and vec.typ == "int":
        return Vec(to_float(vec.values), vec.ok, "float")
    if typ == "int" and vec.typ == "float":
        return Vec(to_long(vec.values), _both(vec.ok, in_long_range(vec.values)), "int")
    return vec


def constant(value: object, typ: str, n: int) -> Vec:
    if typ == "float":
        value = float(value)  # type: ignore[arg-type]
    return Vec(np.full(n, value, dtype=NUMPY[typ]), None, typ)


def value(expr: Expr, df: Mapping[str, np.ndarray], env: Env) -> Vec:  # noqa: PLR0911
    """A typed expression (`plan.exprs`) for every row of ``df``: one numpy operation for
    each operation."""
    n = height(df)
    if isinstance(expr, Nothing):
        return nothing(n, expr.type)
    if isinstance(expr, Literal):
        return constant(expr.value, expr.type, n)
    if isinstance(expr, Var):
        col = env[expr.name]
        ok = None if col.ok is None else np.asarray(df[col.ok], dtype=bool)
        return Vec(df[col.column], ok, col.typ)
    if isinstance(expr, Negate):
        inner = value(expr.operand, df, env)
        return Vec(-inner.values, _both(inner.ok, _negates(inner)), inner.typ)
    if isinstance(expr, Convert):
        return cast(value(expr.operand, df, env), expr.type)
    if isinstance(expr, Compare):
        left, right = value(expr.left, df, env), value(expr.right, df, env)
        out = np.asarray(_COMPARE[expr.op](left.values, right.values), dtype=bool)
        return Vec(out, _both(left.ok, right.ok), "bool")
    if isinstance(expr, Arithmetic):
        left, right = value(expr.left, df, env), value(expr.right, df, env)
        return _arithmetic(expr.op, left, right)
    args = [value(a, df, env) for a in expr.args]
    ok: np.ndarray | None = None
    for a in args:
        ok = _both(ok, a.ok)
    return _apply(expr, args, ok)


_COMPARE = {
    Cmp.EQ: np.equal,
    Cmp.NE: np.not_equal,
    Cmp.LT: np.less,
    Cmp.LE: np.less_equal,
    Cmp.GT: np.greater,
    Cmp.GE: np.greater_equal,
}


def _arithmetic(op: Arith, left: Vec, right: Vec) -> Vec:
    """``left op right`` over two columns of one type of number."""
    ok = _both(left.ok, right.ok)
    a, b = left.values, right.values
    if left.typ == "int":
        if op in (Arith.DIV, Arith.MOD):
            zero = b == 0
            safe = np.where(zero, 1, b)
            rem = np.fmod(a, safe)
            with np.errstate(over="ignore"):
                out = rem if op is Arith.MOD else (a - rem) // safe
            bad = zero
            if op is Arith.DIV:  # the one quotient beyond 64 bits: the least integer by -1
                bad = zero | ((a == LONG_MIN) & (b == -1))
            return Vec(out, _both(ok, ~bad), "int")
        with np.errstate(over="ignore"):
            out = _PLAIN[op](a, b)
        return Vec(out, _both(ok, ~_overflowed(op, a, b, out)), "int")
    with np.errstate(all="ignore"):
        if op in (Arith.DIV, Arith.MOD):
            zero = b == 0
            out = a / b if op is Arith.DIV else np.fmod(a, b)
            out = np.where(zero, 0.0, out)
            return Vec(out, _both(ok, ~zero & np.isfinite(out)), "float")
        out = _PLAIN[op](a, b)
        return Vec(out, _both(ok, np.isfinite(out)), "float")


_PLAIN = {Arith.ADD: np.add, Arith.SUB: np.subtract, Arith.MUL: np.multiply}


def _overflowed(op: Arith, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Where 64-bit ``a op b`` wrapped around (the Spark plans' try_add and kin: undefined)."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if op is Arith.ADD:
        return ((a ^ out) & (b ^ out)) < 0
    if op is Arith.SUB:
        return ((a ^ b) & (a ^ out)) < 0
    low = LONG_MIN
    with np.errstate(all="ignore"):
        nonzero = a != 0
        back = np.floor_divide(out, np.where(nonzero, a, 1))
    return (nonzero & (back != b)) | ((a == -1) & (b == low)) | ((b == -1) & (a == low))


def _round(x: np.ndarray) -> np.ndarray:
    """Half away from zero, exactly (as Spark's HALF_UP on the double's exact value)."""
    whole = np.trunc(x)
    return whole + np.sign(x) * (np.abs(x - whole) >= 0.5)


_ROUNDING = {Fn.FLOOR: np.floor, Fn.CEIL: np.ceil, Fn.ROUND: _round}


def _text(vec: Vec) -> np.ndarray:
    if vec.typ == "bool":
        return np.where(vec.values, "true", "false").astype(object)
    if vec.typ == "str":
        return vec.values
    return np.array([str(v) for v in vec.values.tolist()], dtype=object)


def _strings(values: np.ndarray, fn: Callable[[str], str]) -> np.ndarray:
    return np.array([fn(v) for v in values.tolist()], dtype=object)


def _apply(expr: Apply, args: list[Vec], ok: np.ndarray | None) -> Vec:  # noqa: PLR0911
    fn, values = expr.fn, [a.values for a in args]
    if fn is Fn.ABS:
        return Vec(np.abs(values[0]), _both(ok, _negates(args[0])), expr.type)
    if fn in (Fn.MIN, Fn.MAX):
        stacked = np.stack(values)
        if expr.type == "float":  # Spark orders NaN above every number
            big = np.isnan(stacked)
            pick = np.where(big, np.inf, stacked)
            out = pick.min(axis=0) if fn is Fn.MIN else pick.max(axis=0)
            nan_wins = big.any(axis=0) if fn is Fn.MAX else big.all(axis=0)
            out = np.where(nan_wins, np.nan, out)
        else:
            out = stacked.min(axis=0) if fn is Fn.MIN else stacked.max(axis=0)
        return Vec(out, ok, expr.type)
    if fn in (Fn.FLOOR, Fn.CEIL, Fn.ROUND):
        whole = _ROUNDING[fn](values[0])
        return Vec(to_long(whole), _both(ok, in_long_range(values[0])), "int")
    if fn is Fn.LENGTH:
        return Vec(np.array([len(v) for v in values[0].tolist()], np.int64), ok, "int")
    if fn in (Fn.LOWER, Fn.UPPER):
        return Vec(_strings(values[0], str.lower if fn is Fn.LOWER else str.upper), ok, "str")
    if fn is Fn.TEXT:
        return Vec(_text(args[0]), ok, "str")
    if fn is Fn.CONCAT:
        joined = ["".join(parts) for parts in zip(*[v.tolist() for v in values], strict=True)]
        return Vec(np.array(joined, dtype=object), ok, "str")
    if fn in (Fn.PARSE_INT, Fn.PARSE_FLOAT):  # text read as the reference reads it
        return _each(FUNCTIONS[expr.type], args[0], ok, expr.type)
    raise TypeError(f"unknown operation {fn}")


def _each(fn: Callable[[Value], Value], vec: Vec, ok: np.ndarray | None, typ: str) -> Vec:
    """``fn`` (one of the language's functions) of each value, one at a time; undefined
    where it says so."""
    out = np.zeros(len(vec.values), dtype=NUMPY[typ])
    valid = np.zeros(len(vec.values), dtype=bool)
    for k, v in enumerate(vec.values.tolist()):
        try:
            out[k] = fn(v)
            valid[k] = True
        except (Undefined, OverflowError):
            continue
    return Vec(out, _both(ok, valid), typ)


def present(vec: Vec) -> np.ndarray:
    """Rows Spark's ``dropna`` keeps: with a value, and not NaN."""
    if vec.typ == "float":
        return vec.valid() & ~np.isnan(vec.values)
    return vec.valid()


def truthy(vec: Vec) -> np.ndarray:
    """Rows where a guard holds: it has a value and the value is true."""
    if vec.typ != "bool":
        return np.zeros(len(vec.values), dtype=bool)
    return vec.values.astype(bool) & vec.valid()
