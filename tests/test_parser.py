"""What the parser makes of the constructs users write."""

from __future__ import annotations

import pytest

from dagster_pomo.lang import PomoSyntaxError, ast, parse


def rule(text: str) -> ast.Rule:
    (statement,) = parse(text).statements
    assert isinstance(statement, ast.Rule)
    return statement


def test_durations_are_milliseconds() -> None:
    head = rule("p(250ms, 5s, 10m, 1h, 1d);").head
    assert [a.value for a in head.args] == [250, 5_000, 600_000, 3_600_000, 86_400_000]
    assert {a.kind for a in head.args} == {"duration"}


def test_arithmetic_precedence_and_associativity() -> None:
    (guard,) = rule("p(x) := q(x) if x - 1 - 2 * 3 < 4;").guards
    # ((x - 1) - (2 * 3)) < 4
    assert guard == ast.BinOp(
        "<",
        ast.BinOp(
            "-",
            ast.BinOp("-", ast.Var("x"), ast.Const(1, "int")),
            ast.BinOp("*", ast.Const(2, "int"), ast.Const(3, "int")),
        ),
        ast.Const(4, "int"),
    )


def test_negative_literals_fold_but_negated_variables_do_not() -> None:
    head = rule("p(-3, -2.5, -x, - 1h);").head
    assert head.args == (
        ast.Const(-3, "int"),
        ast.Const(-2.5, "float"),
        ast.Neg(ast.Var("x")),
        ast.Const(-3_600_000, "duration"),
    )


def test_string_escapes_follow_json() -> None:
    (arg,) = rule(r'p("a\"b\\c\n\u00e9");').head.args
    assert arg == ast.Const('a"b\\c\né', "str")


def test_comments_in_both_styles_are_ignored() -> None:
    corpus = parse("# one\np(1); // two\n// three\nq(2); # four")
    assert [s.head.relation for s in corpus.rules] == ["p", "q"]


def test_semicolons_inside_strings_and_comments_do_not_end_statements() -> None:
    corpus = parse('p("a;b"); # c;d\nq(1);')
    assert [s.head.args for s in corpus.rules] == [
        (ast.Const("a;b", "str"),),
        (ast.Const(1, "int"),),
    ]


def test_seed_annotation_spacing_is_accepted() -> None:
    atom = rule("p(x) := water_level(t, x) @ time(y);").body[0].atom
    assert atom.time == ast.Var("y")


def test_rule_parts() -> None:
    r = rule(
        "alert(t, l) ~ page ~ log := level(t, l) @time(s) ^ !calm(t) if l > 3 ^ s > 0 where k = 2;"
    )
    assert [h.name for h in r.head.handlers] == ["page", "log"]
    assert [lit.negated for lit in r.body] == [False, True]
    assert len(r.guards) == 2 and r.defs[0].var.name == "k"


def test_decl_with_lifetime_and_a_column_named_lifetime() -> None:
    (decl,) = parse(".decl session(user: str, lifetime: int) lifetime 30m;").decls
    assert decl.columns[1].name == "lifetime" and decl.lifetime == 1_800_000


def test_spans_point_at_the_source() -> None:
    corpus = parse("\n  p(x) := q(x);", "f.pomo")
    r = corpus.rules[0]
    assert (r.span.line, r.span.column) == (2, 3)
    assert corpus.source.slice(r.body[0].span) == "q(x)"


def test_int_overflow_is_a_syntax_error() -> None:
    with pytest.raises(PomoSyntaxError, match="64 bits"):
        parse("p(9223372036854775808);")


def test_every_bad_statement_is_reported() -> None:
    with pytest.raises(PomoSyntaxError) as info:
        parse("p(x) := ;\nok(1);\nq(x) :- r(x);\n")
    assert [d.span.line for d in info.value.diagnostics] == [1, 3]


def test_a_relations_definition_ignores_layout_comments_order_and_handlers() -> None:
    """What code versions are made of: the text that fixes a relation's events."""
    from dagster_pomo.lang import compile_corpus

    base = compile_corpus(
        ".decl e(a: int) lifetime 1h;\np(x) := e(x) if x > 1;\np(x) := e(x) if x < -1;\n"
        "q(x) := p(x);\n"
    )
    same = compile_corpus(
        "# comments and layout\n.decl e(a: int) lifetime 60m;\np(x) := e(x)\n  if x < -1;\n"
        "p(x) ~ notify := e(x) if x > 1;  // a handler does not change p's events\n"
        "q(x) := p(x);\n"
    )
    for name in ("e", "p", "q"):
        assert same.definition(name) == base.definition(name), name
    other = compile_corpus(
        ".decl e(a: int) lifetime 2h;\np(x) := e(x) if x > 1;\np(x) := e(x) if x < -2;\n"
        "q(x) := p(x);\n"
    )
    assert other.definition("e") != base.definition("e")
    assert other.definition("p") != base.definition("p")
    assert other.definition("q") == base.definition("q")


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["plain", "bom"])
@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_a_corpus_reads_the_same_whatever_its_line_ends(bom: bytes, end: bytes) -> None:
    """LF, CRLF and CR line ends, with or without a byte-order mark: the same statements,
    and an error on the line an editor shows it on (a CR-only file once read as one
    comment, so its rules silently did nothing)."""
    lines = [b"# levels", b"p(1);", b"q(x) := p(x);", b"r(x) := q(x) ^"]
    good = bom + end.join(lines[:3]) + end
    assert parse(good, "c.pomo").statements == parse(b"\n".join(lines[:3]), "c.pomo").statements
    assert len(parse(good, "c.pomo").statements) == 2
    with pytest.raises(PomoSyntaxError) as caught:
        parse(bom + end.join(lines) + end, "c.pomo")
    assert [(d.span.line, d.span.column) for d in caught.value.diagnostics] == [(4, 15)]


def test_a_file_of_comments_alone_is_an_error_and_an_empty_one_is_not() -> None:
    """A file that holds text but no statement is refused, saying so (what a user meant as
    rules would otherwise do nothing); an empty or blank file is an empty corpus."""
    with pytest.raises(PomoSyntaxError) as caught:
        parse("# p(1);\n// q(2);\n", "c.pomo")
    assert "holds no statement" in caught.value.diagnostics[0].message
    assert parse("", "c.pomo").statements == () and parse(" \n\n", "c.pomo").statements == ()
