"""Hypothesis strategies for rule corpora: syntax trees and dependency programs."""

from __future__ import annotations

from hypothesis import strategies as st

from dagster_pomo.lang import ast
from dagster_pomo.lang.parser import KEYWORDS

_INT64 = 2**63 - 1

names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(lambda n: n not in KEYWORDS)


def consts() -> st.SearchStrategy[ast.Const]:
    return st.one_of(
        st.integers(-_INT64, _INT64).map(lambda v: ast.Const(v, "int")),
        st.floats(allow_nan=False, allow_infinity=False).map(lambda v: ast.Const(v, "float")),
        st.integers(-(10**12), 10**12).map(lambda v: ast.Const(v, "duration")),
        st.text(max_size=8).map(lambda v: ast.Const(v, "str")),
        st.booleans().map(lambda v: ast.Const(v, "bool")),
    )


def _compound(children: st.SearchStrategy[ast.Expr]) -> st.SearchStrategy[ast.Expr]:
    return st.one_of(
        st.builds(ast.BinOp, st.sampled_from(ast.BINARY_OPS), children, children),
        # Unary minus of a numeric literal is folded into the literal by the parser.
        children.filter(lambda e: not isinstance(e, ast.Const)).map(ast.Neg),
        st.builds(ast.Call, names, st.lists(children, max_size=3).map(tuple)),
    )


def exprs() -> st.SearchStrategy[ast.Expr]:
    leaves = st.one_of(consts(), names.map(ast.Var))
    return st.recursive(leaves, _compound, max_leaves=8)


# Strategies are built once, here, not at each draw: Hypothesis works out what a strategy
# can draw (a recursive one above all) the first time it draws from it, which took most of
# the language properties' time when the composites below built theirs anew every draw.
expressions = exprs()
args = st.lists(st.one_of(expressions, st.just(ast.Wildcard())), max_size=4).map(tuple)
annotations = st.builds(ast.Annotation, names, st.lists(expressions, max_size=2).map(tuple))
handlers = st.builds(ast.Handler, names)


@st.composite
def atoms(draw: st.DrawFn) -> ast.Atom:
    """An atom, its arguments given by position or, when it has some, maybe by name."""
    given = draw(args)
    named = bool(given) and draw(st.booleans())
    return ast.Atom(
        draw(names),
        given,
        tuple(draw(st.lists(annotations, max_size=2))),
        tuple(draw(st.lists(handlers, max_size=1))),
        names=tuple(draw(st.lists(names, min_size=len(given), max_size=len(given))))
        if named
        else None,
    )


def aggregations(
    variables: st.SearchStrategy[str], arguments: st.SearchStrategy[ast.Expr]
) -> st.SearchStrategy[ast.Aggregation]:
    """A body aggregate's result, function and argument (none for ``count``)."""
    counts = st.builds(ast.Aggregation, variables.map(ast.Var), st.just("count"))
    others = st.builds(
        ast.Aggregation,
        variables.map(ast.Var),
        st.sampled_from([f for f in ast.AGGREGATES if f != "count"]),
        arguments,
    )
    return st.one_of(counts, others)


def body_literals(
    atom: st.SearchStrategy[ast.Atom], summary: st.SearchStrategy[ast.Aggregation]
) -> st.SearchStrategy[ast.BodyLiteral]:
    """Positive and negated atoms, and body aggregates over an atom."""
    return st.one_of(
        st.builds(ast.BodyLiteral, atom, st.booleans()),
        st.builds(ast.BodyLiteral, atom, st.just(False), aggregation=summary),
    )


literals = body_literals(atoms(), aggregations(names, expressions))
definitions = st.builds(ast.Definition, names.map(ast.Var), expressions)


@st.composite
def rules(draw: st.DrawFn) -> ast.Rule:
    body = tuple(draw(st.lists(literals, max_size=3)))
    guards = tuple(draw(_guards)) if body else ()
    defs = tuple(draw(st.lists(definitions, max_size=2)))
    choices = tuple(draw(_one_choice)) if body else ()
    return ast.Rule(draw(_heads), body, guards, defs, check=draw(st.booleans()), choices=choices)


def _choices(variables: st.SearchStrategy[str]) -> st.SearchStrategy[ast.Choice]:
    """``choose((keys), (values))``: distinct variables, at least one value."""
    return st.lists(variables, min_size=1, max_size=4, unique=True).flatmap(
        lambda vs: st.integers(0, len(vs) - 1).map(
            lambda k: ast.Choice(
                tuple(ast.Var(v) for v in vs[:k]), tuple(ast.Var(v) for v in vs[k:])
            )
        )
    )


_guards = st.lists(expressions, max_size=2)
_one_choice = st.lists(_choices(names), max_size=1)
_heads = atoms()

decls = st.builds(
    ast.Decl,
    names,
    st.lists(st.builds(ast.Column, names, st.sampled_from(ast.COLUMN_TYPES)), max_size=4).map(
        tuple
    ),
    st.one_of(st.none(), st.integers(1, 10**12)),
)

corpora = st.lists(st.one_of(rules(), decls), max_size=6).map(
    lambda statements: ast.Corpus(tuple(statements))
)


@st.composite
def dependency_programs(draw: st.DrawFn) -> str:
    """Programs over relations r0..r5 with random positive, negated and aggregating bodies.

    Every rule is range-restricted, so whether it compiles depends only on its
    dependency graph: some are stratifiable, some are not.
    """
    n_rel = draw(st.integers(2, 6))
    heads = [f"r{i}" for i in range(n_rel)]
    rels = list(heads)  # aggregating relations join the bodies' choices, never the heads'
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        head = draw(st.sampled_from(heads))
        positives = draw(st.lists(st.sampled_from(rels), min_size=1, max_size=3))
        negatives = draw(st.lists(st.sampled_from(rels), max_size=2))
        body = [f"{r}(x)" for r in positives] + [f"!{r}(x)" for r in negatives]
        aggregate = draw(st.booleans()) and draw(st.booleans())
        next_ = not aggregate and draw(st.integers(0, 5)) == 0
        if aggregate:
            # An aggregating relation has its own name: one rule derives it.
            head = f"a{len(lines)}"
            lines.append(f"{head}(x) @count := {' ^ '.join(body)};")
            rels.append(head)
        elif next_:  # it carries its head over, so it is a safe `@next` rule
            lines.append(f"{head}(x) @next := {' ^ '.join([f'{head}(x)', *body])};")
        else:
            lines.append(f"{head}(x) := {' ^ '.join(body)};")
    return "\n".join(lines) + "\n"


# PomoLogic: the same trees, with uppercase variables and atoms that name their attributes
# or not (an atom with no arguments names none: `p()` omits every attribute).
upper_names = st.from_regex(r"[A-Z][A-Za-z0-9_]{0,6}", fullmatch=True)


def pomologic_exprs() -> st.SearchStrategy[ast.Expr]:
    leaves = st.one_of(consts(), upper_names.map(ast.Var))
    return st.recursive(leaves, _compound, max_leaves=8)


_upper_exprs = pomologic_exprs()
_upper_args = st.lists(st.one_of(_upper_exprs, st.just(ast.Wildcard())), max_size=4)
_upper_annotations = st.lists(
    st.builds(ast.Annotation, names, st.lists(_upper_exprs, max_size=2).map(tuple)), max_size=2
)


@st.composite
def pomologic_atoms(draw: st.DrawFn) -> ast.Atom:
    args = tuple(draw(_upper_args))
    named = not args or draw(st.booleans())
    given = st.lists(names, min_size=len(args), max_size=len(args))
    attributes = tuple(draw(given)) if named else None
    return ast.Atom(
        draw(names),
        args,
        tuple(draw(_upper_annotations)),
        tuple(draw(st.lists(handlers, max_size=1))),
        names=attributes,
    )


_upper_body = st.lists(
    body_literals(pomologic_atoms(), aggregations(upper_names, _upper_exprs)), max_size=3
)
_upper_guards = st.lists(
    st.builds(ast.BinOp, st.sampled_from(sorted(ast.COMPARISONS)), _upper_exprs, _upper_exprs),
    max_size=2,
)
_upper_definitions = st.lists(
    st.builds(ast.Definition, upper_names.map(ast.Var), _upper_exprs), max_size=2
)
_upper_choice = st.lists(_choices(upper_names), max_size=1)
_upper_heads = pomologic_atoms()


@st.composite
def pomologic_rules(draw: st.DrawFn) -> ast.Rule:
    body = tuple(draw(_upper_body))
    guards = tuple(draw(_upper_guards)) if body else ()
    defs = tuple(draw(_upper_definitions)) if body else ()
    choices = tuple(draw(_upper_choice)) if body else ()
    check = draw(st.booleans())
    return ast.Rule(draw(_upper_heads), body, guards, defs, check=check, choices=choices)


pomologic_corpora = st.lists(st.one_of(pomologic_rules(), decls), max_size=6).map(
    lambda statements: ast.Corpus(tuple(statements))
)
