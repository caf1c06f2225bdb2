"""A rule's plan: everything its executors need, worked out once from the AST.

Every backend (Spark's DataFrame plans, the local executor over pandas and numpy)
evaluates a rule the same way: scan each positive atom (the column each variable
reads, the columns that must be equal, constants to match, expressions to check once
the match is bound), join each scan to those before it (on shared variables, on
buckets of a band the guards keep two integers in, or as a product), add the ``where``
definitions in resolved order, filter by the guards, drop matches a negated atom is
alive for, and make the head. A `RulePlan` holds each of those steps decided, with
the variables' types, so no executor re-runs a language analysis at evaluation time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from dagster_pomo.lang import ast
from dagster_pomo.lang.check import CLOCK, binding_of
from dagster_pomo.lang.interpret import Value
from dagster_pomo.lang.kinds import summarised_kinds
from dagster_pomo.lang.render import render_rule
from dagster_pomo.lang.source import Span
from dagster_pomo.plan.band_joins import Band, bands
from dagster_pomo.plan.constant_defs import constant_values
from dagster_pomo.plan.exprs import Expr, Literal, Var, known_type, lower
from dagster_pomo.plan.scans import CID, atom_columns, atom_reads
from dagster_pomo.plan.schema import Schema, SchemaError, rule_env

if TYPE_CHECKING:
    from dagster_pomo.plan.steps import Steps

Typed = tuple[str, str]  # (stored column, type)


class JoinKind(StrEnum):
    FIRST = "first"  # the first scan: nothing to join
    ON = "on"  # on shared variables
    BAND = "band"  # on buckets of a band two integer variables are kept in
    CROSS = "cross"  # every pair


@dataclass(frozen=True)
class Join:
    """How a scan joins the scans before it: ``first`` (it is the first), ``on`` shared
    variables, ``band`` (buckets of ``band``, whose ``left`` the earlier scans bind and
    ``right`` this one), or ``cross`` (every pair)."""

    kind: JoinKind
    on: tuple[str, ...] = ()
    band: Band | None = None


@dataclass(frozen=True)
class Scan:
    """One positive atom: what it binds and asks of its relation's stored columns."""

    index: int
    relation: str
    binds: tuple[tuple[str, str, str], ...]  # (variable, column, type), first reads only
    same: tuple[tuple[str, str], ...]  # columns that must be equal
    constants: tuple[tuple[Literal, str, str], ...]  # (constant, column, type) to match
    checks: tuple[tuple[int, Expr, str, str], ...]  # (position, expression, column, type)
    key: tuple[str, ...]  # the columns that tell the atom's events apart
    join: Join
    identity: tuple[str, ...] = ()  # the argument columns an event's content ID digests
    # What a match of a provenance carrier takes from this atom's event: "stored" (its
    # relation carries provenance: its ``_prov``), "own" (an input event: its content ID),
    # or "" (nothing: the head carries none, or a clock tick, which is no source).
    provenance: str = ""

    @property
    def reads_cid(self) -> bool:
        """Whether the atom binds or matches its event's content ID (``@cid``)."""
        read = [c for _, c, _ in self.binds] + [c for *_, c, _ in self.constants]
        return CID in read + [c for _, _, c, _ in self.checks] + [c for p in self.same for c in p]


@dataclass(frozen=True)
class Negation:
    """A negated atom: each argument (None: ``_``) with the stored column it is compared
    with."""

    index: int
    relation: str
    columns: tuple[tuple[Expr | None, str, str], ...]  # (argument, column, type)


@dataclass(frozen=True)
class Definition:
    """A ``where`` definition; ``type`` is the variable's as the language infers it."""

    var: str
    expr: Expr
    type: str


@dataclass(frozen=True)
class Head:
    """What a match makes: the arguments (expression, column, type), an explicit time or
    None (then ``t`` is the match's ``tau``), and the relation's lifetime (None: none)."""

    relation: str
    args: tuple[tuple[Expr, str, str], ...]
    time: Expr | None
    lifetime: int | None
    provenance: bool = False  # its versions carry the union of their scans' provenance
    # Each argument's type as the language infers its expression (None: not known), which
    # a backend compares with its column's.
    found: tuple[str | None, ...] = ()

    def uncapped(self) -> Head:
        """The head with its expiry left to the caller (an ``@next`` stamp sets it)."""
        return replace(self, lifetime=None)


@dataclass(frozen=True)
class Aggregate:
    """A head's aggregates: (function, argument or None for ``count``, output column, type),
    and the relations whose lifetimes bound how long a match lives (``reach``)."""

    functions: tuple[tuple[str, Expr | None, str, str], ...]
    reach_from: tuple[str, ...]
    lattice: str | None = None  # the registered lattice a ``@lattice`` function merges with
    at_one_time: bool = False  # each group's matches are made at one time (`one_time_groups`)
    # Each combination of events matches in one version: every scan reads a relation whose
    # versions are made at their time, one an event (`one_time_groups.one_version_each`);
    # `at_one_time` implies it.
    one_version_each: bool = False
    # Each function's argument's type as the language infers it (None: none, or unknown).
    arg_types: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class BodyAggregate:
    """``var := function arg : atom``. A rule's body aggregates are worked out together
    after the joins, as one more atom of the match: per match (alive on ``[tau, mexp)``),
    at ``tau`` and at every time in between that an event of one of their groups arrives
    or expires, each ``function`` over its group's events alive then. Such a piece starts
    then (its ``kt``) and lives until the match or the first of the events it covers
    expires. ``index`` numbers its atom after the scans."""

    index: int
    var: str
    function: str
    arg: Expr | None  # None for ``count``
    type: str  # the result's
    scan: Scan  # the summarised atom; its join is ``on`` the groups
    group: tuple[str, ...]
    arg_type: str | None = None  # the summarised expression's, as the language infers it

    @property
    def relation(self) -> str:
        return self.scan.relation

    @property
    def empty(self) -> Value | None:
        """The result over no event: a count or a sum is 0; the others have none (no match)."""
        if self.function == "count":
            return 0
        if self.function == "sum":
            return 0.0 if self.type == "float" else 0
        return None


@dataclass(frozen=True)
class Choice:
    """``choose((keys), (values))``: a functional dependency across time. Per keys, the
    values of the first match (the least values among the matches at the earliest
    ``tau``) are the only ones kept, then and later. An epoch reads what earlier epochs
    chose from ``table`` (a relation of the warehouse no rule names: the keys, then the
    values, stamped at that first ``tau``, never expiring) and stores there what it
    chooses for keys seen for the first time."""

    keys: tuple[str, ...]
    values: tuple[str, ...]
    table: Schema


@dataclass(frozen=True)
class RulePlan:
    span: Span  # where the rule is in its source, for messages
    text: str  # the rule as people read it (`pomo plan`)
    scans: tuple[Scan, ...]
    defs: tuple[Definition, ...]
    guards: tuple[Expr, ...]
    negations: tuple[Negation, ...]
    head: Head
    aggregate: Aggregate | None
    inductive: bool  # an ``@next`` or ``@async`` rule
    constants: Mapping[str, Value] = field(default_factory=dict, compare=False)
    types: Mapping[str, str] = field(default_factory=dict, compare=False)
    body_aggregates: tuple[BodyAggregate, ...] = ()
    asynchronous: bool = False  # an ``@async`` rule
    choices: tuple[Choice, ...] = ()  # each ``choose((keys), (values))``
    # The steps every backend walks (`steps.lower`), set by `corpus.plan_steps` last.
    steps: Steps | None = field(default=None, compare=False, repr=False)

    @property
    def relation(self) -> str:
        return self.head.relation

    @property
    def atoms(self) -> int:
        """How many atoms a match has: the scans, then one for the body aggregates."""
        return len(self.scans) + (1 if self.body_aggregates else 0)

    @property
    def window(self) -> bool:
        """Whether the rule is a sliding window: a head aggregate without an explicit
        ``@time``, whose value changes when a match expires as when one arrives (so an epoch
        reads the matches that expired at its start too)."""
        return self.aggregate is not None and self.head.time is None

    @property
    def computed_text(self) -> tuple[str, ...]:
        """The head's text columns whose values the rule computes, not copies from an event
        or constants: the values that can grow round after round (`Budgets.text`)."""
        defined = {d.var for d in self.defs}
        return tuple(
            column
            for expr, column, typ in self.head.args
            if ast.stored_type(typ) == "str"
            and not isinstance(expr, Literal)
            and not (isinstance(expr, Var) and expr.name not in defined)
        )


def plan_rule(rule: ast.Rule, schemas: Mapping[str, Schema], lifetime: int | None) -> RulePlan:
    """The plan of a rule with a body, for relations of ``schemas``: its expressions lowered
    to typed operations (`exprs.lower`) by the types of its variables."""
    constants = constant_values(rule)
    types = rule_env(rule, schemas)
    order = binding_of(rule).def_order
    typed = {**types, **{d.var.name: types.get(d.var.name, "str") for d in order}}
    guards = tuple(lower(g, typed) for g in rule.guards)
    guarded = bands(guards, constants)
    scans: list[Scan] = []
    bound: dict[str, str] = {}  # variable -> type, of the scans so far
    carries = schemas[rule.head.relation].provenance
    for i, atom in enumerate(rule.positive):
        scan = _scan(i, atom, schemas[atom.relation], constants, typed)
        if carries and atom.relation != CLOCK:
            scan = replace(
                scan, provenance="stored" if schemas[atom.relation].provenance else "own"
            )
        shared = tuple(v for v, _, _ in scan.binds if v in bound)
        if not scans:
            join = Join(JoinKind.FIRST)
        elif shared:
            join = Join(JoinKind.ON, shared)
        else:
            band = _band(guarded, bound, {v: typ for v, _, typ in scan.binds})
            join = Join(JoinKind.BAND, band=band) if band is not None else Join(JoinKind.CROSS)
        scans.append(replace(scan, join=join))
        for v, _, typ in scan.binds:
            bound.setdefault(v, typ)
    summaries = tuple(
        _body_aggregate(len(scans) + k, lit, schemas, bound, typed)
        for k, lit in enumerate(rule.body_aggregates)
    )
    defs = tuple(Definition(d.var.name, lower(d.expr, typed), typed[d.var.name]) for d in order)
    negations = tuple(
        Negation(
            k,
            atom.relation,
            tuple(
                (None if isinstance(arg, ast.Wildcard) else lower(arg, typed), col, typ)
                for arg, col, typ in atom_columns(atom, schemas[atom.relation])
            ),
        )
        for k, atom in enumerate(rule.negative)
    )
    schema = schemas[rule.head.relation]
    args = tuple(lower(arg, typed) for arg in rule.head.args)
    head = Head(
        rule.head.relation,
        tuple(zip(args, schema.columns, schema.types, strict=True)),
        None if rule.head.time is None else lower(rule.head.time, typed),
        lifetime,
        carries,
        tuple(known_type(arg) for arg in args),
    )
    aggregate = None
    if rule.aggregates:
        functions = tuple(
            (
                ann.name,
                None if ann.value is None else lower(ann.value, typed),
                f"_agg_{ann.name}",
                typ,
            )
            for ann, (_, _, typ) in zip(rule.aggregates, schema.aggregates, strict=True)
        )
        lattice = next((a.lattice for a in rule.aggregates if a.lattice is not None), None)
        reach = tuple(a.relation for a in rule.positive)
        kinds = tuple(None if arg is None else known_type(arg) for _, arg, _, _ in functions)
        aggregate = Aggregate(functions, reach, lattice, arg_types=kinds)
    return RulePlan(
        rule.span,
        render_rule(rule),
        tuple(scans),
        defs,
        guards,
        negations,
        head,
        aggregate,
        rule.is_inductive,
        constants,
        types,
        summaries,
        rule.is_async,
        tuple(_choice(rule, k, c, types) for k, c in enumerate(rule.choices)),
    )


def _choice(rule: ast.Rule, k: int, choice: ast.Choice, types: Mapping[str, str]) -> Choice:
    """The plan of the rule's ``k``-th ``choose``, its table named after the head's relation
    and the rule's place in the corpus (two rules never share one)."""
    keys = tuple(v.name for v in choice.keys)
    values = tuple(v.name for v in choice.values)
    columns = (*(f"k{i}" for i in range(len(keys))), *(f"v{i}" for i in range(len(values))))
    kinds = tuple(ast.stored_type(types.get(v, "str")) for v in (*keys, *values))
    name = f"_chosen-{rule.head.relation}-{rule.span.start}-{k}"  # no relation has a "-"
    return Choice(keys, values, Schema(name, columns, kinds))


def _scan(
    index: int,
    atom: ast.Atom,
    schema: Schema,
    constants: Mapping[str, Value],
    types: Mapping[str, str],
) -> Scan:
    """What ``atom`` reads of its relation (joined as the first atom: the caller decides);
    ``types``: the variables' its expression arguments read."""
    reads = atom_reads(atom, schema, constants)
    binds = tuple((v, col, typ) for v, (col, typ) in reads.binds.items())
    local = {**types, **{v: typ for v, _, typ in binds}}
    return Scan(
        index,
        atom.relation,
        binds,
        tuple(reads.same),
        tuple((lower(c, {}), col, typ) for c, col, typ in reads.constants),  # type: ignore[misc]
        tuple((j, lower(e, local), col, typ) for j, e, col, typ in reads.checks),
        (*schema.columns, *schema.aggregate_columns, "t"),
        Join(JoinKind.FIRST),
        schema.columns,
    )


def _body_aggregate(
    index: int,
    lit: ast.BodyLiteral,
    schemas: Mapping[str, Schema],
    bound: Mapping[str, str],
    types: Mapping[str, str],
) -> BodyAggregate:
    agg = lit.aggregation
    assert agg is not None
    # The atom reads no `where` constant: its variables are groups or its own.
    scan = _scan(index, lit.atom, schemas[lit.atom.relation], {}, types)
    group = tuple(v for v, _, _ in scan.binds if v in bound)
    typ = types.get(agg.var.name)
    local = {**types, **{v: t for v, _, t in scan.binds}}
    allowed, what = summarised_kinds(agg.function)
    arg = None if agg.arg is None else lower(agg.arg, local)
    kind = None if arg is None else known_type(arg)
    if agg.arg is not None and kind not in allowed:
        raise SchemaError(
            f"line {agg.span.line}: `{agg.var.name} := {agg.function} ...` needs {what}"
        )
    join = Join(JoinKind.ON, group) if group else Join(JoinKind.CROSS)
    scan = replace(scan, join=join)
    return BodyAggregate(index, agg.var.name, agg.function, arg, typ or "int", scan, group, kind)


def _band(guarded: list[Band], left: Mapping[str, str], right: Mapping[str, str]) -> Band | None:
    """The first band the guards keep an integer variable of the scans so far (``left``)
    and one of the next scan (``right``) in, oriented that way."""
    for band in guarded:
        if band.left in right and band.right in left:
            band = band.flipped()  # noqa: PLW2901
        if left.get(band.left) == "int" and right.get(band.right) == "int":
            return band
    return None


def grouped_head_of(head: Head) -> Head:
    """``head`` over an aggregate's grouped columns: argument ``j`` is variable
    ``__head<j>``, an explicit time ``__headt``; each backend binds them to its group's
    columns."""
    return Head(
        head.relation,
        tuple((Var(f"__head{j}", typ), col, typ) for j, (_, col, typ) in enumerate(head.args)),
        None if head.time is None else Var("__headt", "int"),  # see `time_column`
        head.lifetime,
        head.provenance,
    )
