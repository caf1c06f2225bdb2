"""Rule expressions over numpy columns, with the semantics of the Spark plans.

A column is a :class:`Vec`: its values, which rows have one (``ok``; None when all
do) and its static type. Where :mod:`dagster_pomo.engine.spark.exprs` compiles an
expression into a Spark column, :func:`value` works it out for every row of a frame
at once; an undefined value (null for Spark) is a row whose ``ok`` is false. A few
conversions whose text Spark and Python write differently (a float as text, text as
a number) are not done here: :func:`supported` says so, and such rules stay on Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from dagster_pomo.engine.local.column_joins import height
from dagster_pomo.lang import ast
from dagster_pomo.lang.interpret import FUNCTIONS, Undefined, Value
from dagster_pomo.lang.kinds import expr_type

NUMPY = {"int": np.int64, "float": np.float64, "str": object, "bool": np.bool_}
LONG_MAX = np.iinfo(np.int64).max


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


def _family(typ: str | None) -> str | None:
    return "number" if typ in ("int", "float") else typ


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


def cast(vec: Vec, typ: str) -> Vec:
    """``vec`` in a column of type ``typ`` (a number into int or float, anything else as is)."""
    if vec.typ is None:
        return nothing(len(vec.values), typ)
    if typ == "float" and vec.typ == "int":
        return Vec(to_float(vec.values), vec.ok, "float")
    if typ == "int" and vec.typ == "float":
        return Vec(to_long(vec.values), vec.ok, "int")
    return vec


def constant(value: object, typ: str, n: int) -> Vec:
    if typ == "float":
        value = float(value)  # type: ignore[arg-type]
    return Vec(np.full(n, value, dtype=NUMPY[typ]), None, typ)


def value(expr: ast.Expr, df: Mapping[str, np.ndarray], env: Env) -> Vec:
    """``expr`` for every row of ``df`` (numpy columns); ``env`` tells where each variable
    is."""
    n = height(df)
    if isinstance(expr, ast.Const):
        typ = expr_type(expr, {}) or "str"
        return constant(expr.value, typ, n)
    if isinstance(expr, ast.Var):
        col = env[expr.name]
        ok = None if col.ok is None else np.asarray(df[col.ok], dtype=bool)
        return Vec(df[col.column], ok, col.typ)
    if isinstance(expr, ast.Neg):
        inner = value(expr.operand, df, env)
        if inner.typ not in ("int", "float"):
            return nothing(n, "int")
        return Vec(-inner.values, inner.ok, inner.typ)
    if isinstance(expr, ast.BinOp):
        return binop(expr.op, value(expr.left, df, env), value(expr.right, df, env))
    if isinstance(expr, ast.Call):
        types = {name: col.typ for name, col in env.items()}
        args = [value(a, df, env) for a in expr.args]
        return _call(expr.func, args, expr_type(expr, types), n)
    raise TypeError(f"cannot work out {expr!r}")


_COMPARE = {
    "==": np.equal,
    "!=": np.not_equal,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
}


def binop(op: str, left: Vec, right: Vec) -> Vec:
    """``left op right``, as the Spark plans work it out (see the module)."""
    n = len(left.values)
    ok = _both(left.ok, right.ok)
    if op in ast.COMPARISONS:
        if left.typ is None or right.typ is None or _family(left.typ) != _family(right.typ):
            return nothing(n)
        a, b = left.values, right.values
        if left.typ != right.typ:  # an int and a float: compared as doubles
            a, b = to_float(a), to_float(b)
        return Vec(np.asarray(_COMPARE[op](a, b), dtype=bool), ok, "bool")
    if left.typ not in ("int", "float") or right.typ not in ("int", "float"):
        return nothing(n, "int")
    if left.typ == right.typ == "int":
        a, b = left.values, right.values
        if op in ("/", "%"):
            zero = b == 0
            safe = np.where(zero, 1, b)
            rem = np.fmod(a, safe)
            with np.errstate(over="ignore"):
                out = rem if op == "%" else (a - rem) // safe
            bad = zero
            if op == "/":  # the one quotient beyond 64 bits: the least integer by -1
                bad = zero | ((a == np.iinfo(np.int64).min) & (b == -1))
            return Vec(out, _both(ok, ~bad), "int")
        with np.errstate(over="ignore"):
            out = {"+": np.add, "-": np.subtract, "*": np.multiply}[op](a, b)
        return Vec(out, _both(ok, ~_overflowed(op, a, b, out)), "int")
    a, b = to_float(left.values), to_float(right.values)
    with np.errstate(all="ignore"):
        if op in ("/", "%"):
            zero = b == 0
            out = a / b if op == "/" else np.fmod(a, b)
            out = np.where(zero, 0.0, out)
            return Vec(out, _both(ok, ~zero & np.isfinite(out)), "float")
        out = {"+": np.add, "-": np.subtract, "*": np.multiply}[op](a, b)
        return Vec(out, _both(ok, np.isfinite(out)), "float")


def _overflowed(op: str, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Where 64-bit ``a op b`` wrapped around (the Spark plans' try_add and kin: undefined)."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if op == "+":
        return ((a ^ out) & (b ^ out)) < 0
    if op == "-":
        return ((a ^ b) & (a ^ out)) < 0
    low = np.iinfo(np.int64).min
    with np.errstate(all="ignore"):
        nonzero = a != 0
        back = np.floor_divide(out, np.where(nonzero, a, 1))
    return (nonzero & (back != b)) | ((a == -1) & (b == low)) | ((b == -1) & (a == low))


def _round(x: np.ndarray) -> np.ndarray:
    """Half away from zero, exactly (as Spark's HALF_UP on the double's exact value)."""
    whole = np.trunc(x)
    return whole + np.sign(x) * (np.abs(x - whole) >= 0.5)


def _text(vec: Vec) -> np.ndarray:
    if vec.typ == "bool":
        return np.where(vec.values, "true", "false").astype(object)
    if vec.typ == "str":
        return vec.values
    return np.array([str(v) for v in vec.values.tolist()], dtype=object)


def _strings(values: np.ndarray, fn: Callable[[str], str]) -> np.ndarray:
    return np.array([fn(v) for v in values.tolist()], dtype=object)


def _call(name: str, args: list[Vec], typ: str | None, n: int) -> Vec:
    kinds = [a.typ for a in args]
    ok: np.ndarray | None = None
    for a in args:
        ok = _both(ok, a.ok)
    numeric = all(k in ("int", "float") for k in kinds)
    if name in ("abs", "min", "max", "floor", "ceil", "round") and not numeric:
        return nothing(n, "int")
    if name == "abs":
        return Vec(np.abs(args[0].values), ok, kinds[0])
    if name in ("min", "max"):
        out_typ = typ or "float"
        stacked = np.stack([cast(a, out_typ).values for a in args])
        if out_typ == "float":  # Spark orders NaN above every number
            big = np.isnan(stacked)
            pick = np.where(big, np.inf, stacked)
            out = pick.min(axis=0) if name == "min" else pick.max(axis=0)
            nan_wins = big.any(axis=0) if name == "max" else big.all(axis=0)
            out = np.where(nan_wins, np.nan, out)
        else:
            out = stacked.min(axis=0) if name == "min" else stacked.max(axis=0)
        return Vec(out, ok, out_typ)
    if name in ("floor", "ceil"):
        fn = np.floor if name == "floor" else np.ceil
        return Vec(to_long(fn(to_float(args[0].values))), ok, "int")
    if name == "round":
        return Vec(to_long(_round(to_float(args[0].values))), ok, "int")
    if name in ("lower", "upper", "length"):
        if kinds[0] != "str":
            return nothing(n, "str")
        if name == "length":
            return Vec(np.array([len(v) for v in args[0].values.tolist()], np.int64), ok, "int")
        return Vec(_strings(args[0].values, str.lower if name == "lower" else str.upper), ok, "str")
    if name == "str":
        return Vec(_text(args[0]), ok, "str")
    if name == "concat":
        texts = [_text(a) for a in args]
        out = (
            texts[0]
            if len(texts) == 1
            else np.array(
                ["".join(parts) for parts in zip(*[t.tolist() for t in texts], strict=True)],
                dtype=object,
            )
        )
        return Vec(out, ok, "str")
    if name in ("int", "float") and kinds[0] == "str":  # text read as the reference reads it
        return _each(FUNCTIONS[name], args[0], ok, name)
    if name == "int":
        if kinds[0] == "bool":
            return nothing(n, "int")
        return Vec(to_long(args[0].values), ok, "int")
    if name == "float":
        if kinds[0] == "bool":
            return nothing(n, "float")
        return Vec(to_float(args[0].values), ok, "float")
    raise TypeError(f"unknown function {name}")


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
