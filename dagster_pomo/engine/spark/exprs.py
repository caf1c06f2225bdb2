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

from dagster_pomo.lang import interpret
from dagster_pomo.lang.kinds import element_of
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


def to_text(col: Column, typ: str | None) -> Column:
    if typ == "bool":
        return F.when(col, F.lit("true")).when(~col, F.lit("false"))
    if typ == "float":  # the JVM writes 1.0E20 where the language writes 1e+20
        return _as_the_language_does("str", "str")(col)
    return col.cast("string")


def _as_the_language_does(function: str, typ: str) -> Callable[[Column], Column]:
    """The language's own ``function`` (`interpret.FUNCTIONS`) of each value, in Spark's
    Python workers, for what Spark's casts do otherwise (a float as text, text as a
    number): one meaning on every engine. Undefined (an integer past 64 bits too) is null."""
    fn, undefined = interpret.FUNCTIONS[function], interpret.Undefined

    def one(value: object) -> object:
        if value is None:
            return None
        try:
            return fn(value)
        except (undefined, OverflowError):
            return None

    return F.udf(one, SPARK_TYPES[typ], useArrow=False)  # as `rule_frames._merged_by`


def literal(value: object, typ: str) -> Column:
    return F.lit(value).cast(SPARK_TYPES[typ])


def compile_typed(expr: Expr, env: Mapping[str, tuple[str, str]]) -> Typed:
    """A typed expression (`plan.exprs`) as a Spark column: one function of Spark's for
    each operation."""
    if isinstance(expr, Nothing):
        return _null(expr.type)
    return _column(expr, env), expr.type


def _column(expr: Expr, env: Mapping[str, tuple[str, str]]) -> Column:  # noqa: PLR0911
    if isinstance(expr, Nothing):
        return _null(expr.type)[0]
    if isinstance(expr, Literal):
        return literal(expr.value, expr.type)
    if isinstance(expr, Var):
        return F.col(env[expr.name][0])
    if isinstance(expr, Negate):
        return _negated(expr.operand.type, _column(expr.operand, env), operator.neg)
    if isinstance(expr, Convert):
        operand = _column(expr.operand, env)
        if expr.type == "int":
            return _in_long_range(operand, operand.cast("long"))
        return operand.cast(SPARK_TYPES[expr.type])
    if isinstance(expr, Compare):
        return _COMPARE[expr.op](_column(expr.left, env), _column(expr.right, env))
    if isinstance(expr, Arithmetic):
        return _arithmetic(expr, _column(expr.left, env), _column(expr.right, env))
    args = [_column(a, env) for a in expr.args]
    return _apply(expr, args)


_COMPARE = {
    Cmp.EQ: operator.eq,
    Cmp.NE: operator.ne,
    Cmp.LT: operator.lt,
    Cmp.LE: operator.le,
    Cmp.GT: operator.gt,
    Cmp.GE: operator.ge,
}


def _arithmetic(expr: Arithmetic, left: Column, right: Column) -> Column:
    if expr.type == "int":
        if expr.op in (Arith.DIV, Arith.MOD):
            value = (
                ((left - left % right) / right).cast("long")
                if expr.op is Arith.DIV
                else left % right
            )
            return F.when(right == 0, F.lit(None).cast("long")).otherwise(value)
        # Undefined (null) where the result leaves 64 bits, as in the reference.
        checked = {Arith.ADD: F.try_add, Arith.SUB: F.try_subtract, Arith.MUL: F.try_multiply}
        return checked[expr.op](left, right)
    if expr.op in (Arith.DIV, Arith.MOD):
        value = left / right if expr.op is Arith.DIV else left % right
        return _finite(F.when(right == 0, F.lit(None).cast("double")).otherwise(value))
    plain = {Arith.ADD: operator.add, Arith.SUB: operator.sub, Arith.MUL: operator.mul}
    return _finite(plain[expr.op](left, right))


def _negated(typ: str, x: Column, fn: Callable[[Column], Column]) -> Column:
    """``fn(x)``, a negation or ``abs``, or null (undefined) for the least integer, whose
    negation leaves 64 bits (the JVM would give it back unchanged)."""
    return F.when(x != F.lit(-(2**63)), fn(x)) if typ == "int" else fn(x)


def _in_long_range(x: Column, whole: Column) -> Column:
    """``whole``, the integer of the float ``x``, or null (undefined) where it does not fit in
    64 bits (the JVM would saturate it): ``x`` outside [-2**63, 2**63)."""
    return F.when((x >= F.lit(-(2.0**63))) & (x < F.lit(2.0**63)), whole)


def _finite(value: Column) -> Column:
    """``value``, or null (undefined) where it overflowed to an infinity."""
    return F.when(F.abs(value) < float("inf"), value)


def _apply(expr: Apply, cols: list[Column]) -> Column:  # noqa: PLR0911
    fn = expr.fn
    if fn is Fn.ABS:
        return _negated(expr.args[0].type, cols[0], F.abs)
    if fn in (Fn.MIN, Fn.MAX):
        # Spark's least and greatest skip a null argument; an undefined one makes it undefined.
        undefined = reduce(operator.or_, [c.isNull() for c in cols])
        return F.when(~undefined, F.least(*cols) if fn is Fn.MIN else F.greatest(*cols))
    if fn in (Fn.FLOOR, Fn.CEIL):
        whole = (F.floor if fn is Fn.FLOOR else F.ceil)(cols[0]).cast("long")
        return _in_long_range(cols[0], whole)
    if fn is Fn.ROUND:
        return _in_long_range(cols[0], F.round(cols[0], 0).cast("long"))
    if fn is Fn.LENGTH:
        return F.length(cols[0]).cast("long")
    if fn in (Fn.LOWER, Fn.UPPER):
        return F.lower(cols[0]) if fn is Fn.LOWER else F.upper(cols[0])
    if fn is Fn.CONCAT:
        return F.concat(*cols)
    if fn is Fn.TEXT:
        return to_text(cols[0], expr.args[0].type)
    if fn in (Fn.PARSE_INT, Fn.PARSE_FLOAT):  # text read as the language reads it
        return _as_the_language_does(expr.type, expr.type)(cols[0])
    raise TypeError(f"unknown operation {fn}")


def truthy(col: Column) -> Column:
    """A guard holds only when it is true (null, i.e. undefined, is false)."""
    return F.coalesce(col, F.lit(False))
