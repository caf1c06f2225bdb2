"""Text to AST. The only module that knows lark exists.

Two notations, one AST: the corpus notation of ``.pomo`` files (``grammar.lark``) and
PomoLogic (``pomologic.lark``, files ending in ``.pomologic``). The file is cut into
statements at each top-level ``;`` (PomoLogic: ``.``), outside strings and comments,
and each statement is parsed on its own, so one typo yields one error and the rest of
the file is still checked. Every lark exception is turned into a
:class:`PomoSyntaxError` with file, line, column and a hint. A statement is first
read by :mod:`descent`, ten times faster; lark reads what that declines and words
every error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from importlib.resources import files
from typing import Any, NoReturn

from lark import Lark, Token, Transformer, Tree, UnexpectedInput, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedToken, VisitError

from dagster_pomo.lang import ast
from dagster_pomo.lang.descent import (
    DURATION_UNITS,
    INT64_MAX,
    MAX_BODY,
    Declined,
    Invalid,
    read_statement,
)
from dagster_pomo.lang.errors import SHOWN, Diagnostic, PomoSyntaxError
from dagster_pomo.lang.source import Source, Span

MAX_DEPTH = 100  # levels of a statement's syntax tree (expressions nested in parentheses...)
KEYWORDS = frozenset({"if", "where", "true", "false", "choose"})

# How a terminal is named in "expected ..." messages.
FRIENDLY = {
    "NAME": "a name",
    "INT": "a number",
    "FLOAT": "a number",
    "DURATION": "a duration",
    "STRING": "a string",
    "COMPARE": "a comparison",
    "PLUS": "`+`",
    "MINUS": "`-`",
    "MUL": "an operator",
    "$END": "the end of the statement",
}


@dataclass(frozen=True)
class Notation:
    """How a corpus is written: its grammar, what ends a statement, how to split."""

    name: str
    grammar: str
    end: str  # the statement terminator, as written
    end_terminal: str  # lark's name for it
    lexeme: re.Pattern[str]  # one lexeme at a time: strings, comments, the end, other text


POMO = Notation(
    "pomo",
    "grammar.lark",
    ";",
    "SEMICOLON",
    re.compile(r'"(?:[^"\\\n]|\\.)*"?|#[^\n]*|//[^\n]*|;|[^"#/;]+|/'),
)
# A `.` ends a statement unless a letter, digit or `_` follows it (`.decl`, `1.5`).
POMOLOGIC = Notation(
    "pomologic",
    "pomologic.lark",
    ".",
    "DOT",
    re.compile(
        r'"(?:[^"\\\n]|\\.)*"?|#[^\n]*|//[^\n]*|[0-9]+\.[0-9]+|\.(?![A-Za-z0-9_])'
        r'|[^"#/.0-9]+|[0-9]+|/|\.'
    ),
)


def notation_of(name: str) -> Notation:
    """The notation a file's name says it is written in: ``.pomologic`` or the corpus's."""
    return POMOLOGIC if name.endswith(".pomologic") else POMO


@cache
def _lark(grammar_file: str = POMO.grammar) -> Lark:
    grammar = files("dagster_pomo.lang").joinpath(grammar_file).read_text()
    return Lark(
        grammar,
        start="statement",
        parser="lalr",
        lexer="contextual",
        propagate_positions=True,
        maybe_placeholders=False,
    )


class _Failure(Exception):
    """Raised inside the transformer; unwrapped from lark's VisitError."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        self.diagnostic = diagnostic


def parse(
    text: str | bytes, name: str = "<corpus>", notation: Notation | None = None
) -> ast.Corpus:
    """Parse a whole corpus, reporting every statement's syntax error at once. The
    notation is the file name's (see :func:`notation_of`) unless given."""
    source = _decode(text, name)
    notation = notation or notation_of(name)
    statements: list[ast.Statement] = []
    problems: list[Diagnostic] = []
    for start, end in split_statements(source.text, notation):
        try:
            statements.append(read_statement(source, start, end, notation is POMOLOGIC))
            continue
        except Invalid as invalid:
            if len(problems) >= SHOWN:  # past those shown, a count: no need for words
                problems.append(_unexpected(source, invalid))
                continue
        except Declined:
            pass
        try:
            statements.append(lark_statement(source, start, end, notation))
        except _Failure as failure:
            problems.append(failure.diagnostic)
    if not statements and not problems and source.text.strip():
        message = "this file holds no statement: only comments and blank lines"
        hint = f"write rules and declarations, each ending with `{notation.end}`"
        problems.append(Diagnostic(message, source.span(0, 0), hint))
    if problems:
        raise PomoSyntaxError(source, problems)
    return ast.Corpus(tuple(statements), source)


def _lines(text: str) -> str:
    """A corpus's text as the parser reads it: a leading byte-order mark dropped, and lines
    ending in CRLF or a lone CR (as old Mac editors save) ending in LF, so that line
    numbers are the ones an editor shows, whichever way the file was saved."""
    text = text.removeprefix("\ufeff")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def _decode(text: str | bytes, name: str) -> Source:
    if isinstance(text, str):
        return Source(name, _lines(text))
    try:
        return Source(name, _lines(text.decode("utf-8")))
    except UnicodeDecodeError as exc:
        readable = text[: exc.start].decode("utf-8")
        source = Source(name, readable)
        span = source.span(len(readable), len(readable))
        message = f"the file is not valid UTF-8 (byte 0x{text[exc.start]:02x})"
        raise PomoSyntaxError(
            source, [Diagnostic(message, span, "save the corpus as UTF-8 text")]
        ) from None


def split_statements(text: str, notation: Notation = POMO) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each statement: up to and including a top-level ``;`` (or
    PomoLogic's ``.``).

    A trailing piece with no terminator is yielded only if it holds more than blanks
    and comments, so that the parser can say the statement is unfinished. A PomoLogic
    ``.`` inside parentheses (``p(x: 2.)``) ends nothing, unless it ends its line: the
    parser reports it where it is.
    """
    start = 0
    pending_code = False
    end = notation.end
    depth = 0  # PomoLogic only: parentheses open outside strings and comments
    for match in notation.lexeme.finditer(text):
        lexeme = match.group()
        at_top = depth <= 0 or _line_ends(text, match.end())
        if lexeme == end and (end != "." or (at_top and _ends(text, match.end()))):
            yield start, match.end()
            start, pending_code, depth = match.end(), False, 0
        elif not lexeme.startswith(("#", "//")) and lexeme.strip():
            pending_code = True
            if end == "." and not lexeme.startswith('"'):
                depth += lexeme.count("(") - lexeme.count(")")
    if pending_code:
        yield start, len(text)


def _line_ends(text: str, after: int) -> bool:
    """Whether only blanks or a comment follow ``after`` on its line: a ``.`` there ends
    its statement even inside unbalanced parentheses, so one missing ``)`` hides no
    later statement."""
    rest = text[after : (text.find("\n", after) + 1 or len(text) + 1) - 1].strip()
    return not rest or rest.startswith(("#", "//"))


def _ends(text: str, after: int) -> bool:
    """Whether a lone ``.`` (at ``after - 1``) ends a PomoLogic statement: the ``.``
    matched by the lexeme pattern is one no letter, digit or ``_`` follows."""
    return after >= len(text) or not (text[after].isalnum() or text[after] == "_")


def _unexpected(source: Source, invalid: Invalid) -> Diagnostic:
    """A syntax error counted but not shown: where it is, without lark's wording."""
    return Diagnostic(
        f"unexpected `{invalid.text}`", source.span(invalid.pos, invalid.pos + len(invalid.text))
    )


def lark_statement(
    source: Source, start: int, end: int, notation: Notation = POMO
) -> ast.Statement:
    """The statement in ``source.text[start:end]`` as lark reads it: the definition of
    the grammar, and the words of every syntax error (raised as :class:`_Failure`)."""
    chunk = source.text[start:end]
    try:
        tree = _lark(notation.grammar).parse(chunk)
    except UnexpectedInput as exc:
        raise _Failure(_syntax_diagnostic(source, start, chunk, exc, notation)) from None
    too_large = _too_large(source, start, tree)
    if too_large is not None:
        raise _Failure(too_large)
    builder = _ToAst if notation is POMO else _PomoLogicToAst
    try:
        return builder(source, start).transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, _Failure):
            raise exc.orig_exc from None
        raise


def _too_large(source: Source, base: int, tree: Tree[Token]) -> Diagnostic | None:
    """A statement nested deeper than :data:`MAX_DEPTH` or with a body of more than
    :data:`MAX_BODY` atoms, located; every pass after the parser walks the tree recursively,
    and a join of that many atoms is no rule anyone means. Walked without recursion."""

    def where(node: Tree[Token]) -> Span | None:  # only for a statement that is refused
        meta = node.meta
        return None if meta.empty else source.span(base + meta.start_pos, base + meta.end_pos)

    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH and (at := where(node)) is not None:
            return Diagnostic(
                f"expression nested more than {MAX_DEPTH} levels deep",
                at,
                "split it into steps with `where` definitions (`where a = ..., b = a + ...`)",
            )
        if node.data in ("formula", "body"):
            atoms = sum(
                1
                for c in node.children
                if isinstance(c, Tree) and c.data in ("literal", "negated", "positive")
            )
            if atoms > MAX_BODY and (at := where(node)) is not None:
                return Diagnostic(
                    f"a body of {atoms} atoms; at most {MAX_BODY} are joined in one rule",
                    at,
                    "derive intermediate relations from parts of the body and join those",
                )
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, Tree))
    return None


# --------------------------------------------------------------------------- errors


def _describe(terminal: str, notation: Notation = POMO) -> str:
    if terminal in FRIENDLY:
        return FRIENDLY[terminal]
    if terminal == "IMPLIES":
        return "`:-`"
    for term in _lark(notation.grammar).terminals:
        if term.name == terminal and term.pattern.type == "str":
            return f"`{term.pattern.value}`"
    return terminal.lower()


_EXPR_START = {"DURATION", "FLOAT", "INT", "NAME", "STRING", "MINUS", "LPAR"}
_EXPR_WORDS = {"`_`", "`true`", "`false`"}
_OPERATORS = {"COMPARE", "PLUS", "MUL"}
_GROUPS = {"AT": "`@annotation`", "TILDE": "`~ handler`"}


def _expected(names: set[str], notation: Notation = POMO) -> str:
    """A short, readable list of what the parser would have accepted."""
    names = set(names)
    described: list[str] = []
    if len(names & _EXPR_START) >= 3:
        described.append("an expression")
        names = {n for n in names - _EXPR_START if _describe(n, notation) not in _EXPR_WORDS}
    if names & _OPERATORS:
        described.append("an operator")
        names -= _OPERATORS | {"MINUS"}
    described += sorted({_GROUPS.get(n) or _describe(n, notation) for n in names})
    if len(described) == 1:
        return described[0]
    return ", ".join(described[:-1]) + " or " + described[-1]


def _end_of_code_before(text: str, pos: int) -> int:
    """Offset just after the last code character before ``pos`` (skipping comments)."""
    line_start = text.rfind("\n", 0, pos) + 1
    while True:
        line = text[line_start:pos]
        code = re.sub(
            r'"(?:[^"\\\n]|\\.)*"|#.*|//.*',
            lambda m: m.group() if m.group().startswith('"') else " " * len(m.group()),
            line,
        )
        stripped = code.rstrip()
        if stripped or line_start == 0:
            return line_start + len(stripped)
        pos = line_start - 1
        line_start = text.rfind("\n", 0, pos) + 1


def _syntax_diagnostic(
    source: Source, base: int, chunk: str, exc: UnexpectedInput, notation: Notation = POMO
) -> Diagnostic:
    end = notation.end
    finish = f"end every declaration and rule with `{end}`"
    if isinstance(exc, UnexpectedCharacters):
        pos = base + exc.pos_in_stream
        char = chunk[exc.pos_in_stream]
        span = source.span(pos, pos + 1)
        if char == '"':
            return Diagnostic(
                "unterminated string", span, 'close the string with `"` on the same line'
            )
        if char == ".":
            return Diagnostic(
                "unexpected `.`", span, "statements end with `;`; declarations start with `.decl`"
            )
        return Diagnostic(f"unexpected character `{char}`", span, _char_hint(char, notation))
    assert isinstance(exc, UnexpectedToken)
    token = exc.token
    expected = set(exc.expected) | set(getattr(exc, "accepts", None) or ())
    if token.type == "$END":
        pos = _end_of_code_before(chunk, len(chunk)) + base
        return Diagnostic(
            f"the statement is not finished: expected {_expected(expected, notation)}",
            source.span(pos, pos),
            finish if notation.end_terminal in expected else None,
        )
    pos = base + token.start_pos
    span = source.span(pos, base + token.end_pos)
    value = str(token)
    if value == "=" and token.start_pos > 0 and chunk[token.start_pos - 1] == ":":
        # `p(x := ...`: read as the attribute `x:` of a named atom, then `=`.
        hint = "close the atom with `)` first" if notation is POMO else None
        return Diagnostic(
            "unexpected `:=` inside an atom's parentheses", source.span(pos - 1, pos + 1), hint
        )
    if (
        notation.end_terminal in expected
        and source.span(pos, pos).line
        > source.span(base + _end_of_code_before(chunk, token.start_pos), pos).line
    ):
        stop = base + _end_of_code_before(chunk, token.start_pos)
        return Diagnostic(f"missing `{end}` before `{value}`", source.span(stop, stop), finish)
    hint = _token_hint(value, expected, notation)
    if notation is POMO and value == ":" and chunk[token.end_pos : token.end_pos + 1] in "-\u2212":
        hint = "a rule body starts with `:=` here; `:-` is PomoLogic's, for *.pomologic files"
    return Diagnostic(f"unexpected `{value}`: expected {_expected(expected, notation)}", span, hint)


def _char_hint(char: str, notation: Notation = POMO) -> str | None:
    if char == "&":
        if notation is POMOLOGIC:
            return "separate body predicates with `,`"
        return "join body atoms and guard conditions with `^`"
    if char == ";" and notation is POMOLOGIC:
        return "PomoLogic statements end with `.`"
    if char == "^" and notation is POMOLOGIC:
        return "separate body predicates with `,`"
    if char == "|":
        return "write one rule per alternative; there is no `|` in rules"
    if char == "'":
        return 'strings use double quotes: "text"'
    return None


def _token_hint(value: str, expected: set[str], notation: Notation = POMO) -> str | None:
    literals = {_describe(n, notation) for n in expected}
    if notation is POMOLOGIC:
        if value == ";":
            return "PomoLogic statements end with `.`"
        if value == "^":
            return "separate body predicates with `,`"
        if value == ":=" and "IMPLIES" in expected:
            return "a rule's body starts with `:-` (`:=` binds a content ID or an aggregate)"
        if value in {"if", "where"}:
            return "write conditions and definitions as body predicates: `X < 3`, `Y = X + 1`"
        if value == ":" and "IMPLIES" in expected:
            return "a rule's body starts with `:-`"
    if value == "=" and "COMPARE" in expected:
        return "compare with `==`; `=` only defines a variable in a `where` clause"
    if value == ":" and "`:=`" in literals:
        return "a rule body starts with `:=`"
    if value == "," and "`^`" in literals:
        return "join body atoms with `^`, not `,`"
    if value in {"if", "where", "true", "false"}:
        return f"`{value}` is a keyword and cannot name a relation or variable"
    return None


# --------------------------------------------------------------------------- tree -> AST


@dataclass(frozen=True)
class _Args:
    """An atom's arguments as written: positional (``names`` None) or named."""

    args: tuple[ast.Expr, ...]
    names: tuple[str, ...] | None
    name_spans: tuple[Span, ...]


@v_args(meta=True)
class _ToAst(Transformer[Token, Any]):
    """Builds AST nodes; spans are absolute offsets into the whole source."""

    def __init__(self, source: Source, base: int) -> None:
        super().__init__()
        self._source = source
        self._base = base

    def _span(self, meta: Any) -> Span:
        if getattr(meta, "empty", True):
            return self._source.span(self._base, self._base)
        return self._source.span(self._base + meta.start_pos, self._base + meta.end_pos)

    def _tok_span(self, tok: Token) -> Span:
        return self._source.span(self._base + tok.start_pos, self._base + tok.end_pos)

    def _fail(self, message: str, span: Span, hint: str | None = None) -> NoReturn:
        raise _Failure(Diagnostic(message, span, hint))

    # statements
    def statement(self, meta: Any, children: list[Any]) -> ast.Statement:
        return children[0]

    def decl(self, meta: Any, children: list[Any]) -> ast.Decl:
        name = children[0]
        columns = tuple(c for c in children[1:] if isinstance(c, ast.Column))
        lifetimes = [c for c in children[1:] if isinstance(c, int)]
        lifetime = lifetimes[0] if lifetimes else None
        return ast.Decl(self._name(name), columns, lifetime, self._span(meta), self._tok_span(name))

    def column(self, meta: Any, children: list[Token]) -> ast.Column:
        name, typ = children
        return ast.Column(self._name(name), str(typ), self._span(meta))

    def lifetime(self, meta: Any, children: list[Token]) -> int:
        (tok,) = children
        value = self._duration(tok) if tok.type == "DURATION" else self._int(tok)
        if value <= 0:
            self._fail("a lifetime must be positive", self._tok_span(tok))
        return value

    def rule(self, meta: Any, children: list[Any]) -> ast.Rule:
        check = isinstance(children[0], Token) and children[0].type == "CHECK"
        children = children[1:] if check else children
        head = children[0]
        body: tuple[ast.BodyLiteral, ...] = ()
        guards: tuple[ast.Expr, ...] = ()
        defs: tuple[ast.Definition, ...] = ()
        choices: tuple[ast.Choice, ...] = ()
        for child in children[1:]:
            if isinstance(child, tuple) and child and child[0] == "formula":
                body, guards, choices = child[1], child[2], child[3]
            elif isinstance(child, tuple) and child and child[0] == "where":
                defs = child[1]
        return ast.Rule(head, body, guards, defs, self._span(meta), check, choices)

    def formula(self, meta: Any, children: list[Any]) -> tuple[str, tuple, tuple, tuple]:
        lits = tuple(c for c in children if isinstance(c, ast.BodyLiteral))
        guards = next((c[1] for c in children if isinstance(c, tuple)), ())
        choices = tuple(c for c in children if isinstance(c, ast.Choice))
        return ("formula", lits, guards, choices)

    def choice(self, meta: Any, children: list[Any]) -> ast.Choice:
        _, keys, values = children
        if not values:
            self._fail(
                "`choose` needs at least one variable to choose",
                self._span(meta),
                "write `choose((key), (value))`: one value per key",
            )
        return ast.Choice(keys, values, self._span(meta))

    def names(self, meta: Any, children: list[Any]) -> tuple[ast.Var, ...]:
        return tuple(self._choice_var(tok) for tok in children if tok is not None)

    def _choice_var(self, tok: Token) -> ast.Var:
        return ast.Var(self._name(tok), self._tok_span(tok))

    def guard(self, meta: Any, children: list[Any]) -> tuple[str, tuple[ast.Expr, ...]]:
        return ("guard", tuple(children))

    def where(self, meta: Any, children: list[Any]) -> tuple[str, tuple[ast.Definition, ...]]:
        return ("where", tuple(children))

    def definition(self, meta: Any, children: list[Any]) -> ast.Definition:
        name, expr = children
        var = ast.Var(self._name(name), self._tok_span(name))
        return ast.Definition(var, expr, self._span(meta))

    def literal(self, meta: Any, children: list[Any]) -> ast.BodyLiteral:
        return ast.BodyLiteral(children[0], False, self._span(meta))

    def negated(self, meta: Any, children: list[Any]) -> ast.BodyLiteral:
        return ast.BodyLiteral(children[0], True, self._span(meta))

    def aggregated(self, meta: Any, children: list[Any]) -> ast.BodyLiteral:
        name, function, *arg, atom = children
        var = ast.Var(self._name(name), self._tok_span(name))
        summarised = arg[0] if arg else None
        if isinstance(summarised, Token):  # a variable, or an expression in parentheses
            summarised = ast.Var(self._name(summarised), self._tok_span(summarised))
        return self._aggregation(
            meta, var, str(function), self._tok_span(function), summarised, atom
        )

    def _aggregation(
        self,
        meta: Any,
        var: ast.Var,
        fn: str,
        span: Span,
        arg: ast.Expr | None,
        atom: ast.Atom,
    ) -> ast.BodyLiteral:
        """A body aggregate: a known function (written at ``span``), with an argument
        unless it counts."""
        if fn not in ast.AGGREGATES:
            known = ", ".join(ast.AGGREGATES)
            self._fail(f"unknown aggregate `{fn}`", span, f"aggregates: {known}")
        if fn == "count" and arg is not None:
            self._fail(
                "`count` counts the atom's events and takes no argument",
                span,
                f"write `{var.name} := count : {atom.relation}(...)`",
            )
        if fn != "count" and arg is None:
            self._fail(
                f"`{fn}` needs the value it summarises",
                span,
                f"name it after `{fn}`, e.g. `{fn} X : {atom.relation}(...X...)`",
            )
        aggregation = ast.Aggregation(var, fn, arg, self._span(meta))
        return ast.BodyLiteral(atom, False, self._span(meta), aggregation)

    def atom(self, meta: Any, children: list[Any]) -> ast.Atom:
        name, rest = children[0], children[1:]
        given = next((c for c in rest if isinstance(c, _Args)), _Args((), None, ()))
        anns = tuple(c for c in rest if isinstance(c, ast.Annotation))
        handlers = tuple(c for c in rest if isinstance(c, ast.Handler))
        return ast.Atom(
            self._name(name),
            given.args,
            anns,
            handlers,
            self._span(meta),
            self._tok_span(name),
            given.names,
            given.name_spans,
        )

    def positional(self, meta: Any, children: list[Any]) -> _Args:
        return _Args(tuple(children), None, ())

    def named(self, meta: Any, children: list[Any]) -> _Args:
        names = tuple(name for name, _, _ in children)
        spans = tuple(span for _, _, span in children)
        return _Args(tuple(expr for _, expr, _ in children), names, spans)

    def attribute(self, meta: Any, children: list[Any]) -> tuple[str, ast.Expr, Span]:
        name, expr = children
        return (self._name(name), expr, self._tok_span(name))

    def annotation(self, meta: Any, children: list[Any]) -> ast.Annotation:
        return ast.Annotation(str(children[0]), tuple(children[1:]), self._span(meta))

    def handler(self, meta: Any, children: list[Token]) -> ast.Handler:
        return ast.Handler(str(children[0]), self._span(meta))

    # expressions
    def compare(self, meta: Any, children: list[Any]) -> ast.BinOp:
        left, op, right = children
        return ast.BinOp(str(op), left, right, self._span(meta))

    binop = compare

    def neg(self, meta: Any, children: list[Any]) -> ast.Expr:
        operand = children[-1]
        span = self._span(meta)
        if isinstance(operand, ast.Const) and operand.kind in ("int", "float", "duration"):
            return ast.Const(-operand.value, operand.kind, span)
        return ast.Neg(operand, span)

    def int(self, meta: Any, children: list[Token]) -> ast.Const:
        return ast.Const(self._int(children[0]), "int", self._span(meta))

    def float(self, meta: Any, children: list[Token]) -> ast.Const:
        value = float(children[0]) if len(children[0]) <= 400 else float("inf")
        if value in (float("inf"), float("-inf")):
            self._fail("number too large for a float", self._tok_span(children[0]))
        return ast.Const(value, "float", self._span(meta))

    def duration(self, meta: Any, children: list[Token]) -> ast.Const:
        return ast.Const(self._duration(children[0]), "duration", self._span(meta))

    def string(self, meta: Any, children: list[Token]) -> ast.Const:
        tok = children[0]
        try:
            value = json.loads(str(tok), strict=False)
        except json.JSONDecodeError:
            self._fail(
                "invalid escape in string",
                self._tok_span(tok),
                'use \\" \\\\ \\n \\t \\r \\b \\f \\/ or \\uXXXX',
            )
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            self._fail(
                "the string holds a lone surrogate (\\ud800 to \\udfff), which is not text",
                self._tok_span(tok),
                "write a character outside the Basic Multilingual Plane as a pair, "
                "e.g. \\ud83d\\ude00",
            )
        return ast.Const(value, "str", self._span(meta))

    def true(self, meta: Any, children: list[Any]) -> ast.Const:
        return ast.Const(True, "bool", self._span(meta))

    def false(self, meta: Any, children: list[Any]) -> ast.Const:
        return ast.Const(False, "bool", self._span(meta))

    def wildcard(self, meta: Any, children: list[Any]) -> ast.Wildcard:
        return ast.Wildcard(self._span(meta))

    def var(self, meta: Any, children: list[Token]) -> ast.Var:
        return ast.Var(self._name(children[0]), self._span(meta))

    def _name(self, tok: Token) -> str:
        """A relation, variable or column name; keywords the grammar let through are refused."""
        if str(tok) in KEYWORDS:
            self._fail(
                f"`{tok}` is a keyword and cannot be used as a name",
                self._tok_span(tok),
                "pick another name",
            )
        return str(tok)

    def call(self, meta: Any, children: list[Any]) -> ast.Call:
        return ast.Call(str(children[0]), tuple(children[1:]), self._span(meta))

    def _int(self, tok: Token) -> int:
        text = str(tok)
        if len(text.lstrip("0")) > 19 or int(text) > INT64_MAX:
            self._fail("integer literal does not fit in 64 bits", self._tok_span(tok))
        return int(text)

    def _duration(self, tok: Token) -> int:
        text = str(tok)
        digits = text.rstrip("smhd")
        unit = text[len(digits) :]
        fits = len(digits.lstrip("0")) <= 19
        value = int(digits) * DURATION_UNITS[unit] if fits else INT64_MAX + 1
        if value > INT64_MAX:
            self._fail("duration does not fit in 64 bits of milliseconds", self._tok_span(tok))
        return value


@dataclass(frozen=True)
class _Callish:
    """``name(args) suffixes``: an atom where a predicate or a head stands, a function
    call inside an expression (PomoLogic writes both alike)."""

    atom: ast.Atom


@v_args(meta=True)
class _PomoLogicToAst(_ToAst):
    """PomoLogic to the same AST: variables start with an uppercase letter, a body is
    predicates (atoms, negated atoms, constraints, definitions) separated by `,`."""

    def __init__(self, source: Source, base: int) -> None:
        super().__init__(source, base)
        self._lowercase: list[ast.Var] = []  # lowercase names used as variables

    def rule(self, meta: Any, children: list[Any]) -> ast.Rule:
        check = isinstance(children[0], Token) and children[0].type == "CHECK"
        children = children[1:] if check else children
        head = self._atom(children[0])
        body = next((c for c in children[1:] if isinstance(c, list)), [])
        # A lowercase name is a variable where `:=` binds it (`c := count : ...`, as the
        # specification writes one), and only in that rule.
        named = {
            p.aggregation.var.name
            for p in body
            if isinstance(p, ast.BodyLiteral)
            if p.aggregation is not None
        }
        named |= {
            a.args[0].name
            for p in body
            if isinstance(p, ast.BodyLiteral)
            for a in p.atom.annotations
            if a.name == "cid" and a.args and isinstance(a.args[0], ast.Var)
        }
        for var in self._lowercase:
            if var.name not in named:
                self._not_a_variable(var.name, var.span)
        lits = tuple(p for p in body if isinstance(p, ast.BodyLiteral))
        guards = tuple(p for p in body if isinstance(p, ast.BinOp))
        defs = tuple(p for p in body if isinstance(p, ast.Definition))
        choices = tuple(p for p in body if isinstance(p, ast.Choice))
        return ast.Rule(head, lits, guards, defs, self._span(meta), check, choices)

    def body(self, meta: Any, children: list[Any]) -> list[Any]:
        return children

    def positive(self, meta: Any, children: list[Any]) -> ast.BodyLiteral | ast.BinOp:
        (item,) = children
        if isinstance(item, _Callish):
            return ast.BodyLiteral(self._atom(item), False, self._span(meta))
        if isinstance(item, ast.BinOp) and item.op in ast.COMPARISONS:
            return item
        self._fail(
            "a body predicate is an atom, `!atom`, a comparison or a definition `V = expr`",
            self._span(meta),
            "compare values with `==`, `!=`, `<`, `<=`, `>` or `>=`",
        )

    def negated(self, meta: Any, children: list[Any]) -> ast.BodyLiteral:
        return ast.BodyLiteral(self._atom(children[0]), True, self._span(meta))

    def definition(self, meta: Any, children: list[Any]) -> ast.Definition:
        name, expr = children
        var = self._variable(name, self._tok_span(name))
        return ast.Definition(var, self._expr(expr), self._span(meta))

    def content_id(self, meta: Any, children: list[Any]) -> ast.BodyLiteral:
        """``C := atom``: the atom with ``@cid(C)``, which binds (or, bound, matches) the
        content ID of the event it matches."""
        name, item = children
        var = self._variable(name, self._tok_span(name))
        atom = self._atom(item)
        cid = ast.Annotation("cid", (var,), self._span(meta))
        atom = replace(atom, annotations=(*atom.annotations, cid))
        return ast.BodyLiteral(atom, False, self._span(meta))

    def body_aggregate(self, meta: Any, children: list[Any]) -> ast.BodyLiteral:
        """``V := f [X] : atom``."""
        name, function, *arg, item = children
        var = self._variable(name, self._tok_span(name))
        expr = self._expr(arg[0]) if arg else None
        span = self._tok_span(function)
        return self._aggregation(meta, var, str(function), span, expr, self._atom(item))

    def body_aggregate_call(self, meta: Any, children: list[Any]) -> ast.BodyLiteral:
        """``V := f(expr) : atom`` (also written ``f (expr)``): the function and its one
        argument read as a call."""
        name, function, item = children
        var = self._variable(name, self._tok_span(name))
        call = function.atom
        if call.names is not None or call.annotations or call.handlers or len(call.args) > 1:
            self._fail(
                "a body aggregate summarises one value",
                call.span,
                f"write `{var.name} := {call.relation} X : atom` or "
                f"`{var.name} := {call.relation} (expression) : atom`",
            )
        arg = call.args[0] if call.args else None
        return self._aggregation(meta, var, call.relation, call.name_span, arg, self._atom(item))

    def call(self, meta: Any, children: list[Any]) -> _Callish:
        return _Callish(self.atom(meta, children))

    def _choice_var(self, tok: Token) -> ast.Var:
        return self._variable(tok, self._tok_span(tok))

    def positional(self, meta: Any, children: list[Any]) -> _Args:
        return super().positional(meta, [self._expr(c) for c in children])

    def attribute(self, meta: Any, children: list[Any]) -> tuple[str, ast.Expr, Span]:
        name, expr = children
        return super().attribute(meta, [name, self._expr(expr)])

    def annotation(self, meta: Any, children: list[Any]) -> ast.Annotation:
        args = tuple(self._expr(c) for c in children[1:])
        return ast.Annotation(str(children[0]), args, self._span(meta))

    def compare(self, meta: Any, children: list[Any]) -> ast.BinOp:
        left, op, right = children
        return ast.BinOp(str(op), self._expr(left), self._expr(right), self._span(meta))

    binop = compare

    def neg(self, meta: Any, children: list[Any]) -> ast.Expr:
        return super().neg(meta, [self._expr(children[-1])])

    def var(self, meta: Any, children: list[Token]) -> ast.Var:
        return self._variable(children[0], self._span(meta))

    def _variable(self, tok: Token, span: Span) -> ast.Var:
        var = ast.Var(self._name(tok), span)
        if not (var.name[0].isupper() or var.name[0] == "_"):
            self._lowercase.append(var)  # a variable only if the rule binds it with `:=`
        return var

    def _not_a_variable(self, name: str, span: Span) -> NoReturn:
        self._fail(
            f"`{name}` is not a variable: PomoLogic variables start with an uppercase "
            "letter, and constants are literals",
            span,
            f'write `{name[0].upper()}{name[1:]}` for a variable or "{name}" for a string',
        )

    def _atom(self, item: Any) -> ast.Atom:
        assert isinstance(item, _Callish)
        atom = item.atom
        # `p()` omits every attribute (each is `_`), as `p(x: X)` omits the others.
        return atom if atom.args else replace(atom, names=())

    def _expr(self, item: Any) -> ast.Expr:
        """An operand: a call must be a plain function call, not an atom."""
        if not isinstance(item, _Callish):
            return item
        atom = item.atom
        if atom.names is not None or atom.annotations or atom.handlers:
            self._fail(
                f"`{atom.relation}(...)` with attributes or annotations is an atom, which "
                "cannot stand inside an expression",
                atom.span,
                "make it a body predicate of its own, separated by `,`",
            )
        return ast.Call(atom.relation, atom.args, atom.span)
