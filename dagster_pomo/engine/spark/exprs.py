"""Rule expressions as Spark columns, with the semantics of :mod:`dagster_pomo.lang.interpret`.

Types are known statically (from the schemas), so integer and float arithmetic,
truncating division and "undefined" (null) results are decided while compiling.
A null anywhere means "no value": guards treat it as false, heads drop the row.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from functools import reduce

from pyspark import cloudpickle
from pyspark.sql import Column
from pyspark.sql import functions as F

from dagster_pomo.lang import ast, interpret
from dagster_pomo.lang.kinds import element_of
from dagster_pomo.plan.schema import expr_type

SPARK_TYPES = {"int": "long", "float": "double", "str": "string", "bool": "boolean"}

# Spark's Python workers get the language's functions with each task (see
# `_as_the_language_does`), so they need no dagster-pomo of their own.
cloudpickle.register_pickle_by_value(interpret)


def spark_type(typ: str) -> str:
    """A column type (a set's as a sorted array) in Spark SQL's words."""
    element = element_of(typ)
    return SPARK_TYPES[typ] if element is None else f"array<{SPARK_TYPES[element]}>"


Typed = tuple[Column, str | None]


def _null(typ: str = "bool") -> Typed:
    return F.lit(None).cast(SPARK_TYPES[typ]), None


def _family(typ: str | None) -> str | None:
    return "number" if typ in ("int", "float") else typ


def to_text(col: Column, typ: str | None) -> Column:
    if typ == "bool":
        return F.when(col, F.lit("true")).when(~col, F.lit("false"))
    if typ == "float":  # the JVM writes 1.0E20 where the language writes 1e+20
        return _as_the_language_does("str", "str")(col)
    return col.cast("string")


def _as_the_language_does(function: str, typ: str) -> Callable[[Column], Column]:
    """The language's own ``function`` (`interpret.FUNCTIONS`) of each value, in Spark's
    Python workers, for what Spark's casts do otherwise (a float as text, text as a
    number): one meaning on every engine. Undefined, or an integer past 64 bits, is null."""
    fn, undefined = interpret.FUNCTIONS[function], interpret.Undefined
    low, high = -(2**63), 2**63

    def one(value: object) -> object:
        if value is None:
            return None
        try:
            out = fn(value)
        except (undefined, OverflowError):
            return None
        if typ == "int" and not low <= out < high:  # type: ignore[operator]
            return None
        return out

    return F.udf(one, SPARK_TYPES[typ])


def literal(value: object, typ: str) -> Column:
    return F.lit(value).cast(SPARK_TYPES[typ])


def compile_expr(expr: ast.Expr, env: Mapping[str, tuple[str, str]]) -> Typed:
    """``env`` maps a variable to ``(column name, type)``."""
    types = {name: typ for name, (_, typ) in env.items()}
    if isinstance(expr, ast.Const):
        typ = expr_type(expr, {}) or "str"
        return literal(expr.value, typ), typ
    if isinstance(expr, ast.Var):
        column, typ = env[expr.name]
        return F.col(column), typ
    if isinstance(expr, ast.Neg):
        col, typ = compile_expr(expr.operand, env)
        return (-col, typ) if typ in ("int", "float") else _null("int")
    if isinstance(expr, ast.BinOp):
        return _binop(expr, env)
    if isinstance(expr, ast.Call):
        return _call(expr, env, expr_type(expr, types))
    raise TypeError(f"cannot compile {expr!r}")


def _binop(expr: ast.BinOp, env: Mapping[str, tuple[str, str]]) -> Typed:
    left, lt = compile_expr(expr.left, env)
    right, rt = compile_expr(expr.right, env)
    if expr.op in ast.COMPARISONS:
        if lt is None or rt is None or _family(lt) != _family(rt):
            return _null("bool")
        ops = {
            "==": left == right,
            "!=": left != right,
            "<": left < right,
            "<=": left <= right,
            ">": left > right,
            ">=": left >= right,
        }
        return ops[expr.op], "bool"
    if lt not in ("int", "float") or rt not in ("int", "float"):
        return _null("int")
    if lt == rt == "int":
        if expr.op == "/":
            quotient = ((left - left % right) / right).cast("long")
            return F.when(right == 0, F.lit(None).cast("long")).otherwise(quotient), "int"
        if expr.op == "%":
            return F.when(right == 0, F.lit(None).cast("long")).otherwise(left % right), "int"
        # Undefined (null) where the result leaves 64 bits, as in the reference.
        checked = {"+": F.try_add, "-": F.try_subtract, "*": F.try_multiply}[expr.op]
        return checked(left.cast("long"), right.cast("long")), "int"
    left, right = left.cast("double"), right.cast("double")
    if expr.op in ("/", "%"):
        value = left / right if expr.op == "/" else left % right
        return _finite(F.when(right == 0, F.lit(None).cast("double")).otherwise(value)), "float"
    ops = {"+": left + right, "-": left - right, "*": left * right}
    return _finite(ops[expr.op]), "float"


def _finite(value: Column) -> Column:
    """``value``, or null (undefined) where it overflowed to an infinity."""
    return F.when(F.abs(value) < float("inf"), value)


def _call(expr: ast.Call, env: Mapping[str, tuple[str, str]], typ: str | None) -> Typed:
    args = [compile_expr(a, env) for a in expr.args]
    cols = [c for c, _ in args]
    kinds = [t for _, t in args]
    name = expr.func
    numeric = all(k in ("int", "float") for k in kinds)
    if name in ("abs", "min", "max", "floor", "ceil", "round") and not numeric:
        return _null("int")
    if name == "abs":
        return F.abs(cols[0]), kinds[0]
    if name in ("min", "max"):
        spark_type = SPARK_TYPES[typ or "float"]
        cast = [c.cast(spark_type) for c in cols]
        # Spark's least and greatest skip a null argument; an undefined one makes it undefined.
        undefined = reduce(operator.or_, [c.isNull() for c in cols])
        picked = F.least(*cast) if name == "min" else F.greatest(*cast)
        return F.when(~undefined, picked), typ
    if name in ("floor", "ceil"):
        fn = F.floor if name == "floor" else F.ceil
        return fn(cols[0].cast("double")).cast("long"), "int"
    if name == "round":
        return F.round(cols[0].cast("double"), 0).cast("long"), "int"
    if name in ("lower", "upper", "length"):
        if kinds[0] != "str":
            return _null("str")
        if name == "length":
            return F.length(cols[0]).cast("long"), "int"
        return (F.lower(cols[0]) if name == "lower" else F.upper(cols[0])), "str"
    if name in ("concat", "str"):
        texts = [to_text(c, k) for c, k in args]
        return (F.concat(*texts) if name == "concat" else texts[0]), "str"
    if name in ("int", "float") and kinds[0] == "str":  # text read as the language reads it
        return _as_the_language_does(name, name)(cols[0]), name
    if name == "int":
        if kinds[0] == "bool":
            return _null("int")
        return cols[0].cast("long"), "int"
    if name == "float":
        if kinds[0] == "bool":
            return _null("float")
        return cols[0].try_cast("double"), "float"
    raise TypeError(f"unknown function {name}")


def truthy(col: Column) -> Column:
    """A guard holds only when it is true (null, i.e. undefined, is false)."""
    return F.coalesce(col, F.lit(False))
