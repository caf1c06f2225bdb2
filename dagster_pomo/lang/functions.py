"""The built-in functions an expression may call, and their arities.

The language layer only checks names and argument counts; each evaluator maps
the names to its own implementation (Spark column functions, plain Python).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Function:
    name: str
    min_args: int
    max_args: int | None  # None: any number from min_args up
    doc: str


FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        Function("abs", 1, 1, "absolute value"),
        Function("min", 2, None, "smallest argument"),
        Function("max", 2, None, "largest argument"),
        Function("floor", 1, 1, "round down to an integer"),
        Function("ceil", 1, 1, "round up to an integer"),
        Function("round", 1, 1, "round half away from zero to an integer"),
        Function("lower", 1, 1, "lower-case string"),
        Function("upper", 1, 1, "upper-case string"),
        Function("length", 1, 1, "number of characters in a string"),
        Function("concat", 1, None, "strings (or values as strings) joined"),
        Function("str", 1, 1, "value as a string"),
        Function("int", 1, 1, "value as an integer (floats truncate toward zero)"),
        Function("float", 1, 1, "value as a float"),
    )
}


def arity_text(fn: Function) -> str:
    if fn.max_args == fn.min_args:
        return f"{fn.min_args} argument" + ("" if fn.min_args == 1 else "s")
    if fn.max_args is None:
        return f"at least {fn.min_args} arguments"
    return f"{fn.min_args} to {fn.max_args} arguments"
