"""The syntax tree of a rule corpus: frozen dataclasses that carry source spans.

Spans are left out of equality, so two trees compare equal when they say the
same thing, wherever it was written. Nothing from the parser library appears
here: later layers (engine, Dagster) depend only on these classes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, TypeVar, overload
from typing import Literal as TypingLiteral

from dagster_pomo.lang.source import Source, Span

NO_SPAN = Span(0, 0, 1, 1)

_R = TypeVar("_R")


class _once(Generic[_R]):  # noqa: N801 - used as a decorator, as cached_property is
    """A property worked out at its first read and kept in the instance's ``__dict__``
    (which a frozen dataclass still has): ``functools.cached_property`` without the lock
    Python 3.11 takes at each first read, a fifth of checking 100,000 rules."""

    def __init__(self, compute: Callable[[Any], _R]) -> None:
        self._compute = compute
        self._name = compute.__name__
        self.__doc__ = compute.__doc__

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _once[_R]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _R: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> _R | _once[_R]:
        if obj is None:
            return self
        value = obj.__dict__[self._name] = self._compute(obj)
        return value


def _span() -> Span:
    return field(default=NO_SPAN, compare=False, repr=False)  # type: ignore[return-value]


ConstKind = TypingLiteral["int", "float", "str", "bool", "duration"]


@dataclass(frozen=True)
class Const:
    """A literal. Durations are integers of milliseconds that remember their kind."""

    value: int | float | str | bool
    kind: ConstKind
    span: Span = _span()


@dataclass(frozen=True)
class Var:
    name: str
    span: Span = _span()


@dataclass(frozen=True)
class Wildcard:
    """``_``: matches anything, binds nothing."""

    span: Span = _span()


@dataclass(frozen=True)
class Call:
    """A built-in function applied to arguments, e.g. ``abs(x - y)``."""

    func: str
    args: tuple[Expr, ...]
    span: Span = _span()


BINARY_OPS = ("==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%")
COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})


@dataclass(frozen=True)
class BinOp:
    op: str
    left: Expr
    right: Expr
    span: Span = _span()


@dataclass(frozen=True)
class Neg:
    """Unary minus of a non-literal; ``-5`` is folded into ``Const(-5)`` by the parser."""

    operand: Expr
    span: Span = _span()


Expr = Const | Var | Wildcard | Call | BinOp | Neg


def walk_expr(expr: Expr) -> Iterator[Expr]:
    """``expr`` and every expression inside it, parents first."""
    yield expr
    if isinstance(expr, Call):
        for arg in expr.args:
            yield from walk_expr(arg)
    elif isinstance(expr, BinOp):
        yield from walk_expr(expr.left)
        yield from walk_expr(expr.right)
    elif isinstance(expr, Neg):
        yield from walk_expr(expr.operand)


def expr_vars(expr: Expr) -> Iterator[Var]:
    """Every variable occurrence in ``expr``, left to right."""
    return (e for e in walk_expr(expr) if isinstance(e, Var))


@dataclass(frozen=True)
class Annotation:
    """``@name`` or ``@name(args)``: ``@time(t)``, ``@next``, ``@count``, ``@sum(v)``..."""

    name: str
    args: tuple[Expr, ...] = ()
    span: Span = _span()

    @property
    def value(self) -> Expr | None:
        """What a head aggregate aggregates: its last argument (``@lattice("name", v)``
        names its lattice first), None for ``@count``."""
        return self.args[-1] if self.args else None

    @property
    def lattice(self) -> str | None:
        """The registered lattice a ``@lattice("name", v)`` merges with."""
        if self.name != "lattice" or len(self.args) != 2:
            return None
        first = self.args[0]
        return str(first.value) if isinstance(first, Const) else None


@dataclass(frozen=True)
class Handler:
    """``~ name``: subscribes the named action handler to an atom's events."""

    name: str
    span: Span = _span()


@dataclass(frozen=True)
class Atom:
    """``relation(args) @annotations ~ handlers``. Written with named attributes
    (``point(x: X)``), ``names`` holds the attribute of each argument until
    :func:`dagster_pomo.lang.attributes.resolve_attributes` puts the arguments in
    column order (an omitted attribute becomes ``_``) and sets it back to None."""

    relation: str
    args: tuple[Expr, ...]
    annotations: tuple[Annotation, ...] = ()
    handlers: tuple[Handler, ...] = ()
    span: Span = _span()
    name_span: Span = _span()
    names: tuple[str, ...] | None = None
    name_spans: tuple[Span, ...] = field(default=(), compare=False, repr=False)

    def annotation(self, name: str) -> Annotation | None:
        """The first annotation called ``name``, if any."""
        for a in self.annotations:
            if a.name == name:
                return a
        return None

    @property
    def time(self) -> Expr | None:
        """The argument of ``@time(...)``, if the atom has one with exactly one argument."""
        ann = self.annotation("time")
        return ann.args[0] if ann is not None and len(ann.args) == 1 else None


AGGREGATES = ("count", "sum", "min", "max", "average")
# A head may also collect (the set of a value over the matches; a body cannot: no expression
# takes a set) and merge with a lattice registered by name.
HEAD_AGGREGATES = (*AGGREGATES, "collect", "lattice")


@dataclass(frozen=True)
class Choice:
    """``choose((keys), (values))``: among a rule's matches at one time, those with the least
    ``values`` for each ``keys`` (a functional dependency, chosen the same way everywhere)."""

    keys: tuple[Var, ...]
    values: tuple[Var, ...]
    span: Span = _span()


@dataclass(frozen=True)
class Aggregation:
    """``var := function [arg] : atom`` (PomoLogic) or ``var = function [arg] : atom``: the
    summary, over the atom's events alive at the match's time, of ``arg`` (None for
    ``count``). The atom's variables shared with the rest of the body group it; its others
    belong to it alone."""

    var: Var
    function: str
    arg: Expr | None = None
    span: Span = _span()


@dataclass(frozen=True)
class BodyLiteral:
    """A body atom: positive, negated with ``!``, or the atom a body aggregate summarises."""

    atom: Atom
    negated: bool = False
    span: Span = _span()
    aggregation: Aggregation | None = None


@dataclass(frozen=True)
class Definition:
    """``var = expr`` in a rule's ``where`` clause."""

    var: Var
    expr: Expr
    span: Span = _span()


@dataclass(frozen=True)
class Rule:
    """``[.check] head [:= body [if guards]] [where defs];``

    Without a body it is a fact (ground head) or, when the head names handlers,
    a subscription of those handlers to events matching the head pattern. What a rule
    is and its kinds of atom are asked for by every pass, so they are kept once known.
    """

    head: Atom
    body: tuple[BodyLiteral, ...] = ()
    guards: tuple[Expr, ...] = ()
    defs: tuple[Definition, ...] = ()
    span: Span = _span()
    check: bool = False  # a `.check` rule: each event it derives is a violation
    choices: tuple[Choice, ...] = ()

    @property
    def check_severity(self) -> str | None:
        """A `.check` rule's severity: ``"warn"`` with ``@warn`` on its head, else
        ``"error"`` (a violation fails the run); None for other rules."""
        if not self.check:
            return None
        return "warn" if self.head.annotation("warn") is not None else "error"

    @_once
    def is_fact(self) -> bool:
        return not self.body and not self.head.handlers

    @_once
    def is_subscription(self) -> bool:
        return not self.body and bool(self.head.handlers)

    @_once
    def is_inductive(self) -> bool:
        """An ``@next`` or ``@async`` rule: evaluated at the start of the next epoch on the
        epoch just finished, its head lands in that next epoch."""
        return self.head.annotation("next") is not None or self.is_async

    @_once
    def is_async(self) -> bool:
        """An ``@async`` rule: each match of the epoch just finished (a message) is delivered
        at the start of the next, and lives its relation's lifetime from then."""
        return self.head.annotation("async") is not None

    @_once
    def aggregates(self) -> tuple[Annotation, ...]:
        return tuple(a for a in self.head.annotations if a.name in HEAD_AGGREGATES)

    @_once
    def positive(self) -> tuple[Atom, ...]:
        """The atoms a match joins (neither negated nor summarised by a body aggregate)."""
        return tuple(lit.atom for lit in self.body if not lit.negated and lit.aggregation is None)

    @_once
    def body_aggregates(self) -> tuple[BodyLiteral, ...]:
        """The body's aggregates (``V := count : atom``), in order."""
        return tuple(lit for lit in self.body if lit.aggregation is not None)

    @_once
    def negative(self) -> tuple[Atom, ...]:
        return tuple(lit.atom for lit in self.body if lit.negated)

    @_once
    def atoms(self) -> tuple[Atom, ...]:
        """The head, then every body atom (positive or negated), in order."""
        return (self.head, *(lit.atom for lit in self.body))


COLUMN_TYPES = ("int", "float", "str", "bool", "time", "cid")
# Column types stored as another: a time is integer milliseconds, a content ID a string.
STORED_AS = {"time": "int", "cid": "str"}


def stored_type(typ: str) -> str:
    """The type a declared column type is stored and computed as."""
    return STORED_AS.get(typ, typ)


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    span: Span = _span()


@dataclass(frozen=True)
class Decl:
    """``.decl name(col: type, ...) [lifetime DURATION];``"""

    relation: str
    columns: tuple[Column, ...]
    lifetime: int | None = None
    span: Span = _span()
    name_span: Span = _span()


Statement = Decl | Rule


@dataclass(frozen=True)
class Corpus:
    """A parsed corpus file: its statements in source order. ``attributes`` names the
    columns of relations that have no ``.decl`` but are written with named attributes
    (in order of first use); the others are ``c0``, ``c1``..."""

    statements: tuple[Statement, ...]
    source: Source = field(compare=False, repr=False, default=Source("<corpus>", ""))
    attributes: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @cached_property
    def decls(self) -> tuple[Decl, ...]:
        return tuple(s for s in self.statements if isinstance(s, Decl))

    @cached_property
    def rules(self) -> tuple[Rule, ...]:
        """Worked out once: every pass asks for them, and a corpus may hold 100,000."""
        return tuple(s for s in self.statements if isinstance(s, Rule))
