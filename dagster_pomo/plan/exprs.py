"""Rule expressions lowered to typed operations: what every backend computes, decided once.

An expression of the language (`lang.ast`) says ``x + 1`` or ``min(a, b)``; which
operation that is depends on the types: integer or float arithmetic, an integer turned
into a float before it meets one, no value at all where the types do not fit (text
arithmetic, ``abs("a")``). `lower` makes those decisions from the variables' types, so a
backend's compiler maps each node to one primitive of its own (a Spark column function,
a numpy operation) and decides nothing about types. The reference evaluator does not use
this: it works the values out dynamically (`lang.interpret`), its own reading of the
language, so the differential tests compare two derivations of the same rules.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

from dagster_pomo.lang import ast
from dagster_pomo.lang.interpret import Value
from dagster_pomo.lang.kinds import expr_type
from dagster_pomo.lang.render import render_expr

NUMBERS = ("int", "float")


class Arith(StrEnum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"  # integers: truncating toward zero; by zero: no value
    MOD = "%"  # integers: the sign of the dividend; by zero: no value


class Cmp(StrEnum):
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


class Fn(StrEnum):
    """The operations a call lowers to, each over operands of the types it names."""

    ABS = "abs"  # a number, of its own type
    MIN = "min"  # numbers of the result's type; no value if any has none
    MAX = "max"
    FLOOR = "floor"  # a float, to an integer
    CEIL = "ceil"
    ROUND = "round"  # a float, half away from zero, to an integer
    LOWER = "lower"  # text
    UPPER = "upper"
    LENGTH = "length"  # text, to an integer
    CONCAT = "concat"  # texts
    TEXT = "text"  # any value as the language writes it (``str``)
    PARSE_INT = "parse_int"  # text read as the language reads an integer (``int``)
    PARSE_FLOAT = "parse_float"  # ... and a float (``float``)


@dataclass(frozen=True)
class Var:
    """A variable of the match, of a known type."""

    name: str
    type: str


@dataclass(frozen=True)
class Literal:
    value: Value
    type: str
    duration: bool = False  # an integer written as a duration (``5m``), printed so


@dataclass(frozen=True)
class Nothing:
    """No value for any row: an operation on values of types it does not take."""

    type: str


@dataclass(frozen=True)
class Negate:
    operand: Expr
    type: str  # the operand's, a number


@dataclass(frozen=True)
class Arithmetic:
    """``left op right`` over two operands of ``type``: ``int`` (no value past 64 bits) or
    ``float`` (no value where it is infinite)."""

    op: Arith
    left: Expr
    right: Expr
    type: str


@dataclass(frozen=True)
class Compare:
    """``left op right`` over two operands of one type (an integer beside a float is
    converted first)."""

    op: Cmp
    left: Expr
    right: Expr
    type: str = "bool"


@dataclass(frozen=True)
class Convert:
    """A number as the other kind of number: an integer as a float, or a float as an integer
    (toward zero, as the JVM casts)."""

    operand: Expr
    type: str


@dataclass(frozen=True)
class Apply:
    fn: Fn
    args: tuple[Expr, ...]
    type: str


Expr = Var | Literal | Nothing | Negate | Arithmetic | Compare | Convert | Apply


def lower(expr: ast.Expr, types: Mapping[str, str]) -> Expr:
    """``expr`` as typed operations, given the types of the variables it reads."""
    if isinstance(expr, ast.Const):
        return Literal(expr.value, expr_type(expr, {}) or "str", expr.kind == "duration")
    if isinstance(expr, ast.Var):
        return Var(expr.name, types[expr.name])
    if isinstance(expr, ast.Neg):
        operand = lower(expr.operand, types)
        return Negate(operand, operand.type) if _number(operand) else Nothing("int")
    if isinstance(expr, ast.BinOp):
        left, right = lower(expr.left, types), lower(expr.right, types)
        if expr.op in ast.COMPARISONS:
            return _compare(Cmp(expr.op), left, right)
        return _arithmetic(Arith(expr.op), left, right)
    if isinstance(expr, ast.Call):
        return _call(expr.func, [lower(a, types) for a in expr.args])
    raise TypeError(f"`_` has no value: {expr!r}")


def known_type(e: Expr) -> str | None:
    """``e``'s type, or None when it has no value (`Nothing`)."""
    return None if isinstance(e, Nothing) else e.type


def equals(left: Expr, right: Expr) -> Expr:
    """``left == right``: how an argument is matched against the column it is compared with."""
    return _compare(Cmp.EQ, left, right)


def _number(e: Expr) -> bool:
    return not isinstance(e, Nothing) and e.type in NUMBERS


def as_type(e: Expr, typ: str) -> Expr:
    """A number ``e`` as a number of ``typ`` (converted where it is the other kind)."""
    if isinstance(e, Nothing):
        return Nothing(typ)
    return e if e.type == typ else Convert(e, typ)


def _compare(op: Cmp, left: Expr, right: Expr) -> Expr:
    if isinstance(left, Nothing) or isinstance(right, Nothing):
        return Nothing("bool")
    if _number(left) and _number(right):
        typ = "int" if left.type == right.type == "int" else "float"
        return Compare(op, as_type(left, typ), as_type(right, typ))
    if left.type != right.type:  # text beside a number, a truth value beside text: none
        return Nothing("bool")
    return Compare(op, left, right)


def _arithmetic(op: Arith, left: Expr, right: Expr) -> Expr:
    if not (_number(left) and _number(right)):
        return Nothing("int")
    typ = "int" if left.type == right.type == "int" else "float"
    return Arithmetic(op, as_type(left, typ), as_type(right, typ), typ)


def text(e: Expr) -> Expr:
    """``e`` as text, as the language writes it."""
    if isinstance(e, Nothing):
        return Nothing("str")
    return e if e.type == "str" else Apply(Fn.TEXT, (e,), "str")


_NUMERIC = {"abs": Fn.ABS, "min": Fn.MIN, "max": Fn.MAX}
_ROUNDING = {"floor": Fn.FLOOR, "ceil": Fn.CEIL, "round": Fn.ROUND}
_TEXT = {"lower": (Fn.LOWER, "str"), "upper": (Fn.UPPER, "str"), "length": (Fn.LENGTH, "int")}


def _call(name: str, args: list[Expr]) -> Expr:
    if name in _NUMERIC or name in _ROUNDING:
        if not all(_number(a) for a in args):
            return Nothing("int")
        if name == "abs":
            return Apply(Fn.ABS, (args[0],), args[0].type)
        if name in _NUMERIC:
            typ = "int" if all(a.type == "int" for a in args) else "float"
            return Apply(_NUMERIC[name], tuple(as_type(a, typ) for a in args), typ)
        return Apply(_ROUNDING[name], (as_type(args[0], "float"),), "int")
    if name in _TEXT:
        fn, typ = _TEXT[name]
        if isinstance(args[0], Nothing) or args[0].type != "str":
            return Nothing(typ)
        return Apply(fn, (args[0],), typ)
    if name == "str":
        return text(args[0])
    if name == "concat":
        texts = tuple(text(a) for a in args)
        if any(isinstance(t, Nothing) for t in texts):
            return Nothing("str")
        return texts[0] if len(texts) == 1 else Apply(Fn.CONCAT, texts, "str")
    if name in ("int", "float"):
        arg = args[0]
        if isinstance(arg, Nothing) or arg.type not in (*NUMBERS, "str"):
            return Nothing(name)
        if arg.type == "str":
            return Apply(Fn.PARSE_INT if name == "int" else Fn.PARSE_FLOAT, (arg,), name)
        return as_type(arg, name)
    raise TypeError(f"unknown function {name}")


def variables(e: Expr) -> Iterator[str]:
    """The variables ``e`` reads, left to right."""
    if isinstance(e, Var):
        yield e.name
    elif isinstance(e, Negate | Convert):
        yield from variables(e.operand)
    elif isinstance(e, Arithmetic | Compare):
        yield from variables(e.left)
        yield from variables(e.right)
    elif isinstance(e, Apply):
        for a in e.args:
            yield from variables(a)


_SPELLED = {Fn.TEXT: "str", Fn.PARSE_INT: "int", Fn.PARSE_FLOAT: "float"}


def _source(e: Expr) -> ast.Expr:
    """``e`` written in the language, its conversions spelled out (``float(x)``)."""
    if isinstance(e, Var):
        return ast.Var(e.name)
    if isinstance(e, Literal):
        kind = "duration" if e.duration else e.type
        return ast.Const(e.value, kind)  # type: ignore[arg-type]
    if isinstance(e, Nothing):
        return ast.Var("undefined")
    if isinstance(e, Negate):
        return ast.Neg(_source(e.operand))
    if isinstance(e, Convert):
        return ast.Call(e.type, (_source(e.operand),))
    if isinstance(e, Arithmetic | Compare):
        return ast.BinOp(e.op.value, _source(e.left), _source(e.right))
    return ast.Call(_SPELLED.get(e.fn, e.fn.value), tuple(_source(a) for a in e.args))


def render(e: Expr) -> str:
    """``e`` as ``pomo plan`` prints it."""
    return render_expr(_source(e))
