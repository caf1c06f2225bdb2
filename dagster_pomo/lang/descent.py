"""A hand-written reader of the corpus notation: the fast path of :mod:`parser`.

lark's LALR parser costs about 0.2 ms a statement, most of it building and then
transforming a parse tree, so a corpus of 100,000 rules took 20 s to parse. This
recursive-descent reader builds the same AST with the same spans straight from one
regular-expression scan, about ten times faster. It reads only what it is sure of: at
anything unusual (a syntax error, a keyword where a name stands, a number too large,
an escape in a string, nesting that lark's tree-depth check might refuse) it declines
and the statement is parsed by lark, which stays the definition of the grammar and
words every syntax error. A test compares the two readings, spans included, on
generated and mutated corpora.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from dagster_pomo.lang import ast
from dagster_pomo.lang.source import Source, Span

MAX_BODY = 100  # atoms in one rule's body: lark's reading refuses more, in words
MAX_EXPR_DEPTH = 60  # deeper expressions are left to lark's reading, which bounds depth
INT64_MAX = 2**63 - 1
DURATION_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# Words the grammar gives a meaning; a name spelled so is left to lark's reading.
RESERVED = frozenset({"if", "where", "true", "false", "choose", "_", "lifetime"})

# Every token, and blanks and comments; no groups, so that ``findall`` hands back strings
# (twice as fast as match objects) and a token's kind is told from its first character.
_TOKEN = re.compile(
    r"[ \t\f\r\n]+|#[^\n]*|//[^\n]*"
    r"|[0-9]+(?:ms|s|m|h|d)(?![A-Za-z0-9_])"  # a duration
    r"|[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"  # a float
    r"|[0-9]+"
    r'|"(?:[^"\\\n]|\\.)*"'
    r"|[A-Za-z_][A-Za-z0-9_]*"
    r"|\.decl|\.check|:=|:-|:\u2212|\u2190|==|!=|<=|>=|[<>(),:;^!=@~+\-*/%.]"
)
_IMPLIES = frozenset({":-", ":\u2212", "\u2190"})  # PomoLogic's, all one token
_BLANK = frozenset(" \t\f\r\n#")
_COMPARE = frozenset({"==", "!=", "<=", ">=", "<", ">"})
_NUMERIC = frozenset({"int", "float", "duration"})
_LEAVES = frozenset({"NAME", "INT", "FLOAT", "DURATION", "STRING"})
_AFTER = frozenset({",", ")", ";", "^", ".", ":"})  # tokens that end an expression

Token = tuple[str, str, int, int]  # kind (NAME, INT... or the punctuation itself), text, start, end


class Declined(Exception):
    """This reader is not sure of the statement; lark's reading decides."""


class Invalid(Declined):
    """The statement breaks the grammar at ``pos`` (lark's reading words why)."""

    def __init__(self, pos: int, text: str) -> None:
        super().__init__(text)
        self.pos = pos
        self.text = text


def tokens(text: str, start: int, end: int, lower: list[int] | None = None) -> list[Token]:
    """The tokens of ``text[start:end]``, positions absolute; a character no token starts
    with is :class:`Invalid` there. ``lower`` gets the index of each name that starts with
    a lowercase letter."""
    out: list[Token] = []
    pos = start
    for tok in _TOKEN.findall(text, start, end):
        n = len(tok)
        first = tok[0]
        if first in _BLANK or (first == "/" and n > 1):
            pos += n
            continue
        if first.isdigit():
            kind = "DURATION" if tok[-1].isalpha() else "INT" if tok.isdigit() else "FLOAT"
        elif first == '"':
            if "\\" in tok:
                raise Declined("escape")  # lark's reading decodes escapes
            kind = "STRING"
        elif first.isalpha() or first == "_":
            kind = "NAME"
            if lower is not None and first.islower():
                lower.append(len(out))
        else:
            kind = "IMPLIES" if tok in _IMPLIES else tok
        out.append((kind, tok, pos, pos + n))
        pos += n
    if pos != end:  # findall stepped over a character no token starts with
        raise Invalid(*_unreadable(text, start, end))
    return out


def _unreadable(text: str, start: int, end: int) -> tuple[int, str]:
    """Where the first character no token starts with is, and that character."""
    pos = start
    while (m := _TOKEN.match(text, pos, end)) is not None and pos < end:
        pos = m.end()
    return pos, text[pos : pos + 1]


def read_statement(source: Source, start: int, end: int, pomologic: bool = False) -> ast.Statement:
    """The statement in ``source.text[start:end]`` (written in PomoLogic when
    ``pomologic``), or :class:`Declined`."""
    if not pomologic:
        return _Reader(source, tokens(source.text, start, end)).statement()
    lower: list[int] = []
    return _LogicReader(source, tokens(source.text, start, end, lower), lower).statement()


class _Reader:
    """One statement's tokens, read left to right; ``at`` is the next token's index."""

    END = ";"  # what ends a statement

    def __init__(self, source: Source, toks: list[Token]) -> None:
        self.source = source
        end = toks[-1][3] if toks else 0
        # Two ends: looking one token past the last reads no further, so nothing checks bounds.
        self.toks = [*toks, ("$END", "", end, end), ("$END", "", end, end)]
        self.at = 0
        self.nest = 0  # parentheses, minus signs and calls open: bounded on the way down
        self.span = source.span

    # ------------------------------------------------------------------ tokens

    def _fail(self) -> NoReturn:
        _, text, pos, _ = self.toks[self.at]
        raise Invalid(pos, text)

    def _take(self, kind: str) -> Token:
        tok = self.toks[self.at]
        if tok[0] != kind:
            self._fail()
        self.at += 1
        return tok

    def _colon(self) -> None:
        """A ``:``. Written ``:-`` (``p(x:-1)``), lark's lexer reads it as ``:`` where
        only that fits, so the reader leaves it to lark's reading."""
        kind = self.toks[self.at][0]
        if kind == "IMPLIES":
            raise Declined(":-")
        self._take(":")

    def _name(self) -> Token:
        """A name where the grammar wants one; a reserved word there is lark's to judge."""
        tok = self._take("NAME")
        if tok[1] in RESERVED:
            raise Declined(tok[1])
        return tok

    def _word(self, word: str) -> bool:
        """Whether the next token is the keyword ``word`` (and take it)."""
        kind, text, _, _ = self.toks[self.at]
        if kind == "NAME" and text == word:
            self.at += 1
            return True
        return False

    # ------------------------------------------------------------------ statements

    def statement(self) -> ast.Statement:
        if self.toks[self.at][0] == ".decl":
            stmt: ast.Statement = self._decl()
        else:
            stmt = self._rule()
        if self.at != len(self.toks) - 2:
            self._fail()
        return stmt

    def _decl(self) -> ast.Decl:
        first = self._take(".decl")
        name = self._name()
        self._take("(")
        columns: list[ast.Column] = []
        if self.toks[self.at][0] != ")":
            columns.append(self._column())
            while self.toks[self.at][0] == ",":
                self.at += 1
                columns.append(self._column())
        self._take(")")
        lifetime = None
        if self._word("lifetime"):
            kind = "DURATION" if self.toks[self.at][0] == "DURATION" else "INT"
            tok = self._take(kind)
            lifetime = _duration(tok[1]) if tok[0] == "DURATION" else _int(tok[1])
            if lifetime <= 0:
                raise Declined("lifetime")
        last = self._take(self.END)
        return ast.Decl(
            name[1],
            tuple(columns),
            lifetime,
            self.span(first[2], last[3]),
            self.span(name[2], name[3]),
        )

    def _column(self) -> ast.Column:
        name = self._name()
        self._colon()
        typ = self._name()
        return ast.Column(name[1], typ[1], self.span(name[2], typ[3]))

    def _rule(self) -> ast.Rule:
        check = self.toks[self.at][0] == ".check"
        first = self.toks[self.at][2]
        if check:
            self.at += 1
        head, _ = self._atom()
        body: list[ast.BodyLiteral] = []
        guards: list[ast.Expr] = []
        choices: list[ast.Choice] = []
        defs: list[ast.Definition] = []
        if self.toks[self.at][0] == ":=":
            self.at += 1
            self._literal(body, choices)
            while self.toks[self.at][0] == "^":
                self.at += 1
                self._literal(body, choices)
            if self._word("if"):
                guards.append(self._expr()[0])
                while self.toks[self.at][0] == "^":
                    self.at += 1
                    guards.append(self._expr()[0])
        if sum(1 for lit in body if lit.aggregation is None) > MAX_BODY:
            raise Declined("body")
        if self._word("where"):
            defs.append(self._definition())
            while self.toks[self.at][0] == ",":
                self.at += 1
                defs.append(self._definition())
        return self._ended(first, check, head, body, guards, defs, choices)

    def _ended(
        self,
        first: int,
        check: bool,
        head: ast.Atom,
        body: list[ast.BodyLiteral],
        guards: list[ast.Expr],
        defs: list[ast.Definition],
        choices: list[ast.Choice],
    ) -> ast.Rule:
        """The rule read from ``first``, once the token that ends it is taken."""
        last = self._take(self.END)
        span = self.span(first, last[3])
        return ast.Rule(head, tuple(body), tuple(guards), tuple(defs), span, check, tuple(choices))

    def _definition(self) -> ast.Definition:
        name = self._name()
        self._take("=")
        expr, _, end, _ = self._expr()
        var = ast.Var(name[1], self.span(name[2], name[3]))
        return ast.Definition(var, expr, self.span(name[2], end))

    def _literal(self, body: list[ast.BodyLiteral], choices: list[ast.Choice]) -> None:
        kind = self.toks[self.at][0]
        if kind == "!":
            bang = self.toks[self.at]
            self.at += 1
            atom, end = self._atom()
            body.append(ast.BodyLiteral(atom, True, self.span(bang[2], end)))
        elif kind == "NAME" and self.toks[self.at + 1][0] == "=":
            body.append(self._aggregated())
        elif kind == "NAME" and self.toks[self.at][1] == "choose":
            choices.append(self._choice())
        else:
            atom, _ = self._atom()
            body.append(ast.BodyLiteral(atom, False, atom.span))

    def _aggregated(self) -> ast.BodyLiteral:
        name = self._name()
        self._take("=")
        function = self._take("NAME")
        arg: ast.Expr | None = None
        if self.toks[self.at][0] == "NAME":
            tok = self._name()
            arg = ast.Var(tok[1], self.span(tok[2], tok[3]))
        elif self.toks[self.at][0] == "(":
            self.at += 1
            arg = self._expr()[0]
            self._take(")")
        self._colon()
        atom, end = self._atom()
        fn = function[1]
        if fn not in ast.AGGREGATES or (fn == "count") != (arg is None):
            raise Declined(fn)  # lark's reading says what is wrong
        span = self.span(name[2], end)
        var = ast.Var(name[1], self.span(name[2], name[3]))
        return ast.BodyLiteral(atom, False, span, ast.Aggregation(var, fn, arg, span))

    def _choice(self) -> ast.Choice:
        first = self._take("NAME")
        self._take("(")
        keys = self._names()
        self._take(",")
        values = self._names()
        last = self._take(")")
        if not values:
            raise Declined("choose")
        return ast.Choice(keys, values, self.span(first[2], last[3]))

    def _names(self) -> tuple[ast.Var, ...]:
        self._take("(")
        out: list[ast.Var] = []
        if self.toks[self.at][0] != ")":
            tok = self._name()
            out.append(ast.Var(tok[1], self.span(tok[2], tok[3])))
            while self.toks[self.at][0] == ",":
                self.at += 1
                tok = self._name()
                out.append(ast.Var(tok[1], self.span(tok[2], tok[3])))
        self._take(")")
        return tuple(out)

    def _atom(self) -> tuple[ast.Atom, int]:
        """An atom and the offset its text ends at."""
        name = self._name()
        self._take("(")
        args: list[ast.Expr] = []
        names: list[str] | None = None
        name_spans: list[Span] = []
        if self.toks[self.at][0] != ")":
            if self.toks[self.at][0] == "NAME" and self.toks[self.at + 1][0] == ":":
                names = []
                while True:
                    attr = self._name()
                    self._colon()
                    names.append(attr[1])
                    name_spans.append(self.span(attr[2], attr[3]))
                    args.append(self._arg())
                    if self.toks[self.at][0] != ",":
                        break
                    self.at += 1
            else:
                args.append(self._arg())
                while self.toks[self.at][0] == ",":
                    self.at += 1
                    args.append(self._arg())
        end = self._take(")")[3]
        annotations: list[ast.Annotation] = []
        handlers: list[ast.Handler] = []
        while True:
            kind = self.toks[self.at][0]
            if kind == "@":
                first = self.toks[self.at][2]
                self.at += 1
                ann = self._name()
                end = ann[3]
                ann_args: list[ast.Expr] = []
                if self.toks[self.at][0] == "(":
                    self.at += 1
                    if self.toks[self.at][0] != ")":
                        ann_args.append(self._arg())
                        while self.toks[self.at][0] == ",":
                            self.at += 1
                            ann_args.append(self._arg())
                    end = self._take(")")[3]
                annotations.append(ast.Annotation(ann[1], tuple(ann_args), self.span(first, end)))
            elif kind == "~":
                first = self.toks[self.at][2]
                self.at += 1
                handler = self._name()
                end = handler[3]
                handlers.append(ast.Handler(handler[1], self.span(first, end)))
            else:
                break
        atom = ast.Atom(
            name[1],
            tuple(args),
            tuple(annotations),
            tuple(handlers),
            self.span(name[2], end),
            self.span(name[2], name[3]),
            tuple(names) if names is not None else None,
            tuple(name_spans),
        )
        return atom, end

    # ------------------------------------------------------------------ expressions
    # Each returns (expression, start, end, depth): start and end take in the parentheses
    # around it, as lark's spans of the expressions built on it do.

    def _arg(self) -> ast.Expr:
        """An argument of an atom or an annotation."""
        return self._expr()[0]

    def _operand(self, item: tuple[Any, int, int, int]) -> tuple[Any, int, int, int]:
        """``item`` where a value stands (PomoLogic tells calls from atoms here)."""
        return item

    def _expr(self) -> tuple[ast.Expr, int, int, int]:
        if self.toks[self.at + 1][0] in _AFTER and self.toks[self.at][0] in _LEAVES:
            return self._primary()  # a lone name or literal: most arguments
        left = self._sum()
        if self.toks[self.at][0] in _COMPARE:
            op = self.toks[self.at][1]
            self.at += 1
            right = self._sum()
            return self._binop(op, left, right)
        return left

    def _sum(self) -> tuple[ast.Expr, int, int, int]:
        left = self._product()
        while self.toks[self.at][0] in ("+", "-"):
            op = self.toks[self.at][1]
            self.at += 1
            left = self._binop(op, left, self._product())
        return left

    def _product(self) -> tuple[ast.Expr, int, int, int]:
        left = self._unary()
        while self.toks[self.at][0] in ("*", "/", "%"):
            op = self.toks[self.at][1]
            self.at += 1
            left = self._binop(op, left, self._unary())
        return left

    def _open(self) -> None:
        """One more level open; past :data:`MAX_EXPR_DEPTH` lark's reading (which refuses
        deep statements in words) takes over, before Python's stack runs out."""
        self.nest += 1
        if self.nest > MAX_EXPR_DEPTH:
            raise Declined("depth")

    def _binop(
        self, op: str, left: tuple[ast.Expr, int, int, int], right: tuple[ast.Expr, int, int, int]
    ) -> tuple[ast.Expr, int, int, int]:
        depth = max(left[3], right[3]) + 1
        if depth > MAX_EXPR_DEPTH:
            raise Declined("depth")
        node = ast.BinOp(op, left[0], right[0], self.span(left[1], right[2]))
        return node, left[1], right[2], depth

    def _unary(self) -> tuple[ast.Expr, int, int, int]:
        if self.toks[self.at][0] != "-":
            return self._primary()
        first = self.toks[self.at][2]
        self.at += 1
        self._open()
        operand, _, end, depth = self._operand(self._unary())
        self.nest -= 1
        span = self.span(first, end)
        if isinstance(operand, ast.Const) and operand.kind in _NUMERIC:
            return ast.Const(-operand.value, operand.kind, span), first, end, depth + 1
        return ast.Neg(operand, span), first, end, depth + 1

    def _primary(self) -> tuple[ast.Expr, int, int, int]:
        kind, text, start, end = self.toks[self.at]
        self.at += 1
        if kind == "NAME":
            if text == "true" or text == "false":
                return ast.Const(text == "true", "bool", self.span(start, end)), start, end, 1
            if text == "_":
                return ast.Wildcard(self.span(start, end)), start, end, 1
            if text in RESERVED:
                raise Declined(text)
            if self.toks[self.at][0] != "(":
                return ast.Var(text, self.span(start, end)), start, end, 1
            self.at += 1
            self._open()
            args: list[ast.Expr] = []
            depth = 0
            if self.toks[self.at][0] != ")":
                while True:
                    arg = self._expr()
                    args.append(arg[0])
                    depth = max(depth, arg[3])
                    if self.toks[self.at][0] != ",":
                        break
                    self.at += 1
            last = self._take(")")[3]
            self.nest -= 1
            if depth >= MAX_EXPR_DEPTH:
                raise Declined("depth")
            return ast.Call(text, tuple(args), self.span(start, last)), start, last, depth + 1
        if kind == "INT":
            return ast.Const(_int(text), "int", self.span(start, end)), start, end, 1
        if kind == "FLOAT":
            value = float(text) if len(text) <= 400 else float("inf")
            if value == float("inf"):
                raise Declined("float")
            return ast.Const(value, "float", self.span(start, end)), start, end, 1
        if kind == "DURATION":
            return ast.Const(_duration(text), "duration", self.span(start, end)), start, end, 1
        if kind == "STRING":
            if not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:  # a lone surrogate, which lark's reading refuses
                    raise Declined("surrogate") from None
            return ast.Const(text[1:-1], "str", self.span(start, end)), start, end, 1
        if kind == "(":
            self._open()
            inner, _, _, depth = self._expr()
            last = self._take(")")[3]
            self.nest -= 1
            return inner, start, last, depth
        self.at -= 1
        self._fail()


@dataclass(frozen=True)
class _Callish:
    """PomoLogic's ``name(args) suffixes`` inside an expression: an atom where a
    predicate stands, a function call where an operand does."""

    atom: ast.Atom


class _LogicReader(_Reader):
    """PomoLogic (``head :- predicate, ... .``) to the same AST as lark's reading gives:
    a predicate is an atom, ``!atom``, a comparison, ``V = expr``, ``V := f X : atom``
    or a choice; variables start with an uppercase letter or ``_`` (a lowercase one only
    where ``:=`` binds it)."""

    END = "."

    def __init__(self, source: Source, toks: list[Token], lower: list[int]) -> None:
        super().__init__(source, toks)
        self.lower = lower  # the index of each name that starts with a lowercase letter

    def _rule(self) -> ast.Rule:
        check = self.toks[self.at][0] == ".check"
        first = self.toks[self.at][2]
        if check:
            self.at += 1
        head = _omitted(self._atom()[0])
        body: list[ast.BodyLiteral] = []
        guards: list[ast.Expr] = []
        defs: list[ast.Definition] = []
        choices: list[ast.Choice] = []
        counted = 0  # lark's reading refuses a body of more atoms, comparisons or negations
        if self.toks[self.at][0] == "IMPLIES":
            self.at += 1
            while True:
                counted += self._predicate(body, guards, defs, choices)
                if self.toks[self.at][0] != ",":
                    break
                self.at += 1
        if counted > MAX_BODY:
            raise Declined("body")
        rule = self._ended(first, check, head, body, guards, defs, choices)
        if self._lowercase_names():
            named = {lit.aggregation.var.name for lit in body if lit.aggregation is not None}
            if any(not _variable_name(v) and v not in named for v in _variables(rule)):
                raise Declined("lowercase")  # lark's reading says it is no variable
        return rule

    def _lowercase_names(self) -> bool:
        """Whether a lowercase name may be a variable: one not followed by ``(`` (a relation,
        a function) nor, inside an atom's parentheses, by ``:`` (an attribute)."""
        toks = self.toks
        return any(
            toks[i + 1][0] != "(" and not (toks[i + 1][0] == ":" and toks[i - 1][0] in ("(", ","))
            for i in self.lower
        )

    def _predicate(
        self,
        body: list[ast.BodyLiteral],
        guards: list[ast.Expr],
        defs: list[ast.Definition],
        choices: list[ast.Choice],
    ) -> int:
        """One predicate, added where it belongs; 1 if lark's reading counts it in the
        body's size."""
        kind, text, start, _ = self.toks[self.at]
        if kind == "!":
            self.at += 1
            atom, end = self._atom()
            body.append(ast.BodyLiteral(_omitted(atom), True, self.span(start, end)))
            return 1
        if kind == "NAME" and text == "choose":
            choices.append(self._choice())
            return 0
        if kind == "NAME" and self.toks[self.at + 1][0] == "=":
            name = self._name()
            self.at += 1
            expr, _, end, _ = self._operand(self._expr())
            var = ast.Var(name[1], self.span(name[2], name[3]))
            defs.append(ast.Definition(var, expr, self.span(start, end)))
            return 0
        if kind == "NAME" and self.toks[self.at + 1][0] == ":=":
            body.append(self._body_aggregate())
            return 0
        if kind == "NAME" and self.toks[self.at + 1][0] == "(" and text not in RESERVED:
            at = self.at  # most predicates are an atom alone: read it as one
            atom, end = self._atom()
            if self.toks[self.at][0] in (",", "."):
                body.append(ast.BodyLiteral(_omitted(atom), False, atom.span))
                return 1
            self.at = at  # a call compared (`abs(X) > 1`): read again as an expression
        item, first, end, _ = self._expr()
        if isinstance(item, _Callish):
            body.append(ast.BodyLiteral(_omitted(item.atom), False, self.span(first, end)))
        elif isinstance(item, ast.BinOp) and item.op in ast.COMPARISONS:
            guards.append(item)
        else:
            raise Declined("predicate")
        return 1

    def _body_aggregate(self) -> ast.BodyLiteral:
        """``V := f [X] : atom``. ``V := p(...)`` (a content ID) or ``V := f (X) : ...``
        is left to lark's reading, which tells them apart its own way."""
        name = self._name()
        self.at += 1  # :=
        function = self._take("NAME")
        arg: ast.Expr | None = None
        if self.toks[self.at][0] == "(":
            raise Declined("content ID or aggregate")
        if self.toks[self.at][0] != ":":
            arg = self._operand(self._sum())[0]
        self._colon()
        atom, end = self._atom()
        fn = function[1]
        if fn not in ast.AGGREGATES or (fn == "count") != (arg is None):
            raise Declined(fn)
        span = self.span(name[2], end)
        var = ast.Var(name[1], self.span(name[2], name[3]))
        return ast.BodyLiteral(_omitted(atom), False, span, ast.Aggregation(var, fn, arg, span))

    def _arg(self) -> ast.Expr:
        return self._operand(self._expr())[0]

    def _operand(self, item: tuple[Any, int, int, int]) -> tuple[ast.Expr, int, int, int]:
        """``item`` where a value stands: a call there is a function call, which takes no
        attributes, annotations or handlers."""
        if not isinstance(item[0], _Callish):
            return item
        atom = item[0].atom
        if atom.names is not None or atom.annotations or atom.handlers:
            raise Declined("atom in an expression")
        return ast.Call(atom.relation, atom.args, atom.span), item[1], item[2], item[3]

    def _binop(
        self, op: str, left: tuple[Any, int, int, int], right: tuple[Any, int, int, int]
    ) -> tuple[ast.Expr, int, int, int]:
        return super()._binop(op, self._operand(left), self._operand(right))

    def _primary(self) -> tuple[Any, int, int, int]:
        kind, text, start, _ = self.toks[self.at]
        if kind != "NAME" or self.toks[self.at + 1][0] != "(" or text in RESERVED:
            return super()._primary()
        self._open()
        atom, end = self._atom()
        self.nest -= 1
        depth = max((_depth(a) for a in atom.args), default=0) + 1
        if depth >= MAX_EXPR_DEPTH:
            raise Declined("depth")
        return _Callish(atom), start, end, depth


def _omitted(atom: ast.Atom) -> ast.Atom:
    """PomoLogic's ``p()`` omits every attribute (each is ``_``), as ``p(x: X)`` omits the
    others."""
    return atom if atom.args else replace(atom, names=())


def _variable_name(name: str) -> bool:
    return name[0].isupper() or name[0] == "_"


def _variables(rule: ast.Rule) -> Iterator[str]:
    """Every variable's name in ``rule``: in PomoLogic each is written as one."""
    exprs: list[ast.Expr] = []
    for atom in rule.atoms:
        exprs += atom.args
        exprs += (a for ann in atom.annotations for a in ann.args)
    exprs += rule.guards
    for lit in rule.body:
        if lit.aggregation is not None:
            exprs.append(lit.aggregation.var)
            if lit.aggregation.arg is not None:
                exprs.append(lit.aggregation.arg)
    for d in rule.defs:
        exprs += (d.var, d.expr)
    for c in rule.choices:
        exprs += (*c.keys, *c.values)
    for expr in exprs:
        for var in ast.expr_vars(expr):
            yield var.name


def _depth(expr: ast.Expr) -> int:
    """Levels of ``expr``, as lark's tree nests them (a bound: the reader declines deep
    statements)."""
    if isinstance(expr, ast.BinOp):
        return max(_depth(expr.left), _depth(expr.right)) + 1
    if isinstance(expr, ast.Neg):
        return _depth(expr.operand) + 1
    if isinstance(expr, ast.Call):
        return max((_depth(a) for a in expr.args), default=0) + 1
    return 1


def _int(text: str) -> int:
    if len(text.lstrip("0")) > 19 or int(text) > INT64_MAX:
        raise Declined("int")
    return int(text)


def _duration(text: str) -> int:
    digits = text.rstrip("smhd")
    if len(digits.lstrip("0")) > 19:
        raise Declined("duration")
    value = int(digits) * DURATION_UNITS[text[len(digits) :]]
    if value > INT64_MAX:
        raise Declined("duration")
    return value
