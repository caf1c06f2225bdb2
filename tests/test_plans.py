"""Plans are part of the interface for people reading how a corpus runs: `pomo plan`'s
output for the example corpora and for one corpus per shape of rule (each join kind,
aggregates, negation, recursion linear or not, ``@next``, clocks) is pinned by golden
files, and the plan layer imports no engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_pomo.cli.main import main
from dagster_pomo.examples import CORPORA
from dagster_pomo.lang import compile_corpus
from dagster_pomo.plan.corpus import compile_plan
from dagster_pomo.plan.schema import infer_schemas
from tests.conftest import GOLDEN

SHAPES = sorted((GOLDEN / "plans").glob("*.pomo"))
EXAMPLES = sorted(CORPORA.glob("*.pomo"))


@pytest.mark.parametrize("corpus", [*EXAMPLES, *SHAPES], ids=[c.stem for c in [*EXAMPLES, *SHAPES]])
def test_plan_output_matches_golden(corpus: Path, golden, capsys) -> None:
    assert main(["plan", str(corpus)]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    expected = GOLDEN / "plans" / (("example_" if corpus in EXAMPLES else "") + corpus.stem)
    golden.check(expected.with_suffix(".plan"), out.out)


def test_a_bad_corpus_has_no_plan(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.pomo"
    bad.write_text("a(x) := b(y);\n")
    assert main(["plan", str(bad)]) == 1
    assert "bad.pomo:1:" in capsys.readouterr().err


def test_joins_are_decided_once_in_the_plan() -> None:
    """Each scan after the first says how it joins: on the variables it shares with the
    scans before it, on buckets of a band, or as a product; the executors follow it."""
    program = compile_corpus(
        ".decl a(x: int, y: int);\n.decl b(y: int, z: int);\n.decl c(w: int);\n"
        "r(x, z, w) := a(x, y) ^ b(y, z) ^ c(w) if w >= z ^ w <= z + 10;\n"
        "s(x, w) := a(x, _) ^ c(w) if x != w;\n",
        "joins",
    )
    plan = compile_plan(program, infer_schemas(program, {}))
    r, s = (next(rule for st in plan.strata for rule in st.own(n)) for n in ("r", "s"))
    kinds = [(scan.join.kind, scan.join.on) for scan in r.scans]
    assert kinds == [("first", ()), ("on", ("y",)), ("band", ())]
    band = r.scans[2].join.band
    assert band is not None and (band.left, band.right) == ("z", "w")
    assert [scan.join.kind for scan in s.scans] == ["first", "cross"]


CLOCKED = """.decl level(tank: str, x: float) lifetime 10m;
.decl late(tank: str, x: float);
late(tank, x) @time(t + 1) := level(tank, x) @time(t);
"""


@pytest.mark.parametrize(
    ("rule", "grouped"),
    [
        # the resampling shape: stamped before the tick, every reading before it
        (
            "m(k) @count @time(tick - p / 2) := level(k, x) @time(s) ^ clock(0, p) @time(tick)"
            " if s < tick ^ s >= tick - p where p = 1m;",
            True,
        ),
        (
            "m(k) @count @time(1 + tick) := level(k, x) @time(s) ^ clock(0, 60000) @time(tick)"
            " if s <= tick;",
            True,
        ),
        # a reading may come after the tick: matches at the reading's time too
        (
            "m(k) @count @time(tick) := level(k, x) @time(s) ^ clock(0, 60000) @time(tick)"
            " if s < tick + 5;",
            False,
        ),
        # the earlier atom's time
        (
            "m(k) @count @time(s) := level(k, x) @time(s) ^ clock(0, 60000) @time(tick)"
            " if s < tick;",
            False,
        ),
        # not the tick give or take a constant: two ticks may share a group's time
        (
            "m(k) @count @time(tick / 2) := level(k, x) @time(s) ^ clock(0, 60000) @time(tick)"
            " if s < tick;",
            False,
        ),
        # a derived relation's versions may be known after their time
        (
            "m(k) @count @time(tick) := late(k, x) @time(s) ^ clock(0, 60000) @time(tick)"
            " if s < tick;",
            False,
        ),
        # no explicit time: a running aggregate
        ("m(k) @count := level(k, x) @time(s) ^ clock(0, 60000) @time(tick) if s < tick;", False),
    ],
)
def test_an_aggregate_is_grouped_where_each_group_matches_at_one_time(
    rule: str, grouped: bool
) -> None:
    """`one_time_groups`: a grouping replaces the running window only where the head's time
    is one atom's time (give or take a constant) and the guards keep the others' events,
    known at their own time, no later."""
    program = compile_corpus(CLOCKED + rule + "\n", "clocked.pomo")
    plan = compile_plan(program, infer_schemas(program, {}))
    (made,) = [r for s in plan.strata for r in s.rules if r.relation == "m"]
    assert made.aggregate is not None
    assert made.aggregate.at_one_time is grouped
    assert made.aggregate.one_version_each or not grouped  # the executors rely on it


@pytest.mark.parametrize(
    ("rule", "single"),
    [
        ("m(k) @count := level(k, x);", True),  # an input: one version an event
        ("m(k) @sum(x) := level(k, x) ^ clock(0, 60000);", True),  # and the clock's ticks
        ("m(k) @count := late(k, x);", False),  # derived: an event may have several versions
        ("m(k) @count := level(k, x) ^ late(k, _);", False),
    ],
)
def test_an_aggregate_over_one_version_an_event_needs_no_segments(rule: str, single: bool) -> None:
    """`one_version_each`: a combination of events matches in one version only where every
    atom reads a relation whose versions are made at their time; a derived event's later
    versions must still cut its earlier ones short."""
    program = compile_corpus(CLOCKED + rule + "\n", "clocked.pomo")
    plan = compile_plan(program, infer_schemas(program, {}))
    (made,) = [r for s in plan.strata for r in s.rules if r.relation == "m"]
    assert made.aggregate is not None
    assert made.aggregate.one_version_each is single


def test_every_backend_executes_every_kind_of_step() -> None:
    """The steps are one closed set: each rule is lowered to them once, and each backend
    supplies a primitive for every kind the one walk hands out (a backend missing one is
    not `Primitives`)."""
    from dagster_pomo.engine.interpreter import Primitives
    from dagster_pomo.engine.local.rule_columns import Columns
    from dagster_pomo.engine.spark.rule_frames import Frames

    assert isinstance(Columns(0), Primitives)
    assert isinstance(Frames(), Primitives)
    program = compile_corpus(
        ".decl a(x: int, y: int) lifetime 5;\n.decl b(y: int);\n"
        "n(x) @next := a(x, _) ^ !b(x);\nm(x) @count := a(x, y) ^ !b(y);\n",
        "steps",
    )
    plan = compile_plan(program, infer_schemas(program, {}))
    for stratum in plan.strata:
        for rule in stratum.rules:
            assert rule.steps is not None, "every rule is lowered when the corpus compiles"
            kinds = [type(s).__name__ for s in rule.steps.body]
            if rule.inductive:  # no `Valid`: negations over the epoch before
                assert kinds == ["Read", "AntiJoin"]
                assert type(rule.steps.last).__name__ == "Make"
            else:
                assert kinds == ["Read", "Valid", "AntiJoin"]
                assert type(rule.steps.last).__name__ == "Aggregate"


class _Recording:
    """Primitives that record which step each call is for (for the walk's order)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _(self, name: str, m: object = None) -> str:
        self.calls.append(name)
        return "m"

    def read(self, step, source):
        return self._(f"read {step.scan.relation}")

    def join_on(self, left, right, on):
        return self._(f"join on {','.join(on)}")

    def band_join(self, left, right, band, index):
        return self._("band join")

    def cross(self, left, right):
        return self._("cross")

    def unit(self):
        return self._("unit")

    def summarise(self, m, step, sources, window):
        return self._(f"summarise {step.aggregates[0].var}")

    def let(self, m, step):
        return self._(f"let {step.definition.var}")

    def check(self, m, step):
        return self._("check")

    def filter(self, m, step):
        return self._("filter")

    def valid(self, m, window, a, b):
        return self._(f"valid {window.value}")

    def anti_join(self, m, step, source, during):
        return self._(f"anti-join {step.negation.relation} {'during' if during else 'at tau'}")

    def choose(self, m, step, before):
        return self._("choose"), "chosen"

    def provenance(self, m, step):
        return self._("provenance")

    def make(self, m, step, stamp):
        return self._(f"make {'at ' + str(stamp[0]) if stamp else 'at tau'}")

    def aggregate(self, m, rule, a, b):
        return self._("aggregate")


def test_the_walk_runs_the_printed_steps_in_order() -> None:
    """What `pomo plan` prints is what runs: the one walk hands each step, in the printed
    order, to the backend's primitive for it (a step skipped or moved fails here)."""
    from dagster_pomo.engine.interpreter import derive, derive_next
    from dagster_pomo.timeline import Epoch

    program = compile_corpus(
        ".decl a(x: int, y: int);\n.decl b(y: int, z: int);\n.decl c(w: int);\n"
        ".decl q(x: int);\n"
        "r(x, w) := a(x, y) ^ b(y, _) ^ c(w) ^ !q(x) ^ n = count : b(y, _) ^ choose((x), (w))"
        " if w >= x ^ w <= x + 10 ^ s > 0 where s = x + 1;\n"
        "k(x) @count := a(x, y) ^ b(y + 1, _);\n"
        "p(x) @next := a(x, _) ^ !q(x);\n",
        "walk",
    )
    plan = compile_plan(program, infer_schemas(program, {}))
    rule = {r.relation: r for s in plan.strata for r in s.rules}
    p = _Recording()
    derive(rule["r"], p, ["s"] * 4, ["n"], 0, 10, ["before"])
    assert p.calls == [
        "read a",
        "read b",
        "join on y",
        "read c",
        "band join",
        "summarise n",
        "let s",
        "filter",
        "filter",
        "filter",
        "valid made",
        "anti-join q at tau",
        "choose",
        "make at tau",
    ]
    p = _Recording()
    derive(rule["k"], p, ["s"] * 2, [], 0, 10)
    assert p.calls == ["read a", "read b", "cross", "check", "valid sliding", "aggregate"]
    p = _Recording()
    derive_next(rule["p"], p, ["s"], ["n"], Epoch(10, 20, Epoch(0, 10)))
    assert p.calls == ["read a", "anti-join q during", "make at 20"]


def _syntax_in(value: object, path: str) -> list[str]:
    """Where ``value`` (a plan, walked through its fields and containers) holds a node of
    the language's syntax tree."""
    import dataclasses

    from dagster_pomo.lang import ast

    nodes = (ast.Const, ast.Var, ast.Wildcard, ast.Call, ast.BinOp, ast.Neg, ast.Atom, ast.Rule)
    if isinstance(value, nodes):
        return [path]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [
            found
            for f in dataclasses.fields(value)
            for found in _syntax_in(getattr(value, f.name), f"{path}.{f.name}")
        ]
    if isinstance(value, tuple | list):
        return [found for k, v in enumerate(value) for found in _syntax_in(v, f"{path}[{k}]")]
    if isinstance(value, dict):
        return [found for k, v in value.items() for found in _syntax_in(v, f"{path}[{k!r}]")]
    return []


@pytest.mark.parametrize("corpus", [*EXAMPLES, *SHAPES], ids=[c.stem for c in [*EXAMPLES, *SHAPES]])
def test_a_rules_plan_and_steps_hold_no_syntax_tree(corpus: Path) -> None:
    """What the backends execute is closed: expressions are typed operations
    (`plan.exprs`), atoms their relations' names, so no executor can read the AST."""
    program = compile_corpus(corpus.read_text(), corpus.name)
    plan = compile_plan(program, infer_schemas(program, {}))
    for stratum in plan.strata:
        for rule in stratum.rules:
            assert _syntax_in(rule, "rule") == [], rule.text
            assert _syntax_in(rule.steps, "steps") == [], rule.text
