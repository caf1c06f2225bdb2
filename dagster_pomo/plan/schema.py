"""Column types of every relation, worked out before evaluation.

Spark needs a schema for every relation (also an empty one), and both
evaluators must give a value the same type (an integer derived into a float
column is a float). Types: ``int``, ``float``, ``str``, ``bool``. Declared
columns keep their type (``time`` is ``int``); input columns come from the
data; derived columns from the expressions that compute them, to a fixpoint
for recursive relations. Integers and floats meeting in one column give float.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from dagster_pomo.errors import PomoError
from dagster_pomo.lang import Program, ast
from dagster_pomo.lang.check import CLOCK
from dagster_pomo.lang.kinds import aggregate_type, expr_type, variable_types, widen
from dagster_pomo.lang.render import aggregate_key


class SchemaError(PomoError):
    """A column would have to hold values of incompatible types."""


@dataclass(frozen=True)
class Schema:
    name: str
    columns: tuple[str, ...]
    types: tuple[str, ...]
    aggregates: tuple[tuple[str, str, str], ...] = ()  # (function, output key, type)
    provenance: bool = False  # versions carry the sorted CIDs of the input events they rest on

    @property
    def aggregate_columns(self) -> tuple[str, ...]:
        return tuple(f"{AGGREGATE_PREFIX}{fn}" for fn, _, _ in self.aggregates)


# What every stored version has besides its columns and aggregates.
META = ("t", "kt", "exp", "_tau")
AGGREGATE_PREFIX = "_agg_"  # an aggregate's stored column: the prefix, then its function
PROV = "_prov"  # a carrier's column of provenance: a sorted list of distinct content IDs


def row_columns(schema: Schema) -> list[str]:
    """The stored columns of a relation, in order."""
    return [
        *schema.columns,
        *schema.aggregate_columns,
        *META,
        *([PROV] if schema.provenance else []),
    ]


def rule_env(rule: ast.Rule, schemas: Mapping[str, Schema]) -> dict[str, str]:
    """Types of the variables a rule binds, as far as the ``schemas`` known so far tell."""

    def columns(name: str) -> tuple[str, ...] | None:
        return schemas[name].types if name in schemas else None

    def aggregates(name: str) -> dict[str, str]:
        return {fn: typ for fn, _, typ in schemas[name].aggregates} if name in schemas else {}

    return variable_types(rule, columns, aggregates)


def infer_schemas(
    program: Program, input_types: Mapping[str, tuple[str, ...]]
) -> dict[str, Schema]:
    """A schema for every relation of ``program``; raises :class:`SchemaError` on a conflict."""
    cat = program.catalog
    types: dict[str, list[str | None]] = {}
    aggs: dict[str, list[str | None]] = {}
    for rel in cat:
        declared = [None if t is None else ast.stored_type(t) for t in rel.types]
        if rel.is_input and rel.name in input_types:
            declared = [d or i for d, i in zip(declared, input_types[rel.name], strict=True)]
        types[rel.name] = declared
        aggs[rel.name] = [None] * len(rel.aggregates)
    if CLOCK in cat:
        types[CLOCK] = ["int", "int"]

    def schema(name: str) -> Schema:
        aggregates = tuple(
            (a.name, aggregate_key(a), aggs[name][i] or "int")
            for i, a in enumerate(cat[name].aggregates)
        )
        return Schema(
            name,
            cat[name].columns,
            tuple(t or "str" for t in types[name]),
            aggregates,
            cat[name].provenance,
        )

    def complete(name: str) -> bool:
        """Whether rules reading ``name`` may take its types: all known (inputs always)."""
        return cat[name].is_input or all(t is not None for t in types[name])

    # Facts of derived relations first: rules reading them (`b(x + 1) := a(x)` beside
    # `a(0);`) take their types from them.
    for rule in program.corpus.rules:
        if rule.is_fact and not cat[rule.head.relation].is_input:
            name = rule.head.relation
            for i, arg in enumerate(rule.head.args):
                if cat[name].types[i] is None:
                    types[name][i] = _merge(types[name][i], expr_type(arg, {}), rule, i)

    # A worklist to the fixpoint: a rule is looked at again only when a relation it reads
    # changed (a chain of thousands of rules is one pass, not one pass per link).
    rules = [r for r in program.corpus.rules if r.body]
    readers: dict[str, list[int]] = {}
    for k, rule in enumerate(rules):
        for atom in (*rule.positive, *rule.negative, *(x.atom for x in rule.body_aggregates)):
            readers.setdefault(atom.relation, []).append(k)
    known = {name: schema(name) for name in types if complete(name)}
    waiting = deque(range(len(rules)))
    queued = set(waiting)
    while waiting:
        k = waiting.popleft()
        queued.discard(k)
        rule = rules[k]
        env = rule_env(rule, known)
        name = rule.head.relation
        declared = cat[name].types
        changed = False
        for i, arg in enumerate(rule.head.args):
            if declared[i] is not None:
                continue
            new = _merge(types[name][i], expr_type(arg, env), rule, i)
            if new != types[name][i]:
                types[name][i], changed = new, True
        for i, ann in enumerate(rule.aggregates):
            arg = expr_type(ann.value, env) if ann.value is not None else None
            new = aggregate_type(ann.name, arg)
            if ann.name == "sum" and new not in (None, "int", "float"):
                raise SchemaError(f"line {rule.span.line}: `@sum` needs numbers")
            if new is not None and new != aggs[name][i]:
                aggs[name][i], changed = _merge(aggs[name][i], new, rule, i), True
        if changed and complete(name):
            known[name] = schema(name)
            for j in readers.get(name, ()):
                if j not in queued:
                    waiting.append(j)
                    queued.add(j)
    # Anything left unknown (no data, no constants): str.
    return {name: schema(name) for name in types}


def _merge(old: str | None, new: str | None, rule: ast.Rule, i: int) -> str | None:
    try:
        return widen(old, new)
    except ValueError as exc:
        raise SchemaError(
            f"line {rule.span.line}: column {i} of `{rule.head.relation}` would hold {exc}; "
            "declare the relation with `.decl` or make the rules agree"
        ) from None
