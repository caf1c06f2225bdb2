"""What a positive atom asks of its relation's stored columns, for every evaluator that
builds matches from columns (Spark's plans, the in-process epochs)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dagster_pomo.lang import ast
from dagster_pomo.lang.check import CLOCK
from dagster_pomo.plan.schema import Schema

CID = "_cid"  # the column a scan computes when its atom binds the content ID


def atom_columns(atom: ast.Atom, schema: Schema) -> list[tuple[ast.Expr, str, str]]:
    """Each argument and annotation of ``atom`` with the stored column it reads and its type:
    arguments in column order, ``@time`` reads ``t``, ``@cid`` the content ID (computed as
    the scan reads the relation: see ``engine/cid.py``), an aggregate its ``_agg_`` column."""
    pairs = list(zip(atom.args, schema.columns, schema.types, strict=True))
    reads = {"time": ("t", "int"), "cid": (CID, "str")}
    reads |= {fn: (f"_agg_{fn}", typ) for fn, _, typ in schema.aggregates}
    for ann in atom.annotations:
        pairs.append((ann.args[0], *reads[ann.name]))
    return pairs


@dataclass
class AtomReads:
    """A positive atom's demands on its relation's columns."""

    binds: dict[str, tuple[str, str]] = field(default_factory=dict)  # var -> (column, type)
    same: list[tuple[str, str]] = field(default_factory=list)  # columns that must be equal
    constants: list[tuple[ast.Const, str, str]] = field(default_factory=list)  # must equal
    # (position, expression, column, type): checked once the whole match is bound
    checks: list[tuple[int, ast.Expr, str, str]] = field(default_factory=list)


def atom_reads(atom: ast.Atom, schema: Schema, constants: Mapping[str, object]) -> AtomReads:
    """What ``atom`` binds, and what it asks of the values it reads. A variable written twice
    reads equal values; a clock's arguments are the rule's constants."""
    reads = AtomReads()
    for j, (arg, col, typ) in enumerate(atom_columns(atom, schema)):
        if atom.relation == CLOCK and isinstance(arg, ast.Var) and arg.name in constants:
            arg = ast.Const(constants[arg.name], "int")  # noqa: PLW2901
        if isinstance(arg, ast.Wildcard):
            continue
        if isinstance(arg, ast.Var):
            if arg.name in reads.binds:
                reads.same.append((col, reads.binds[arg.name][0]))
            else:
                reads.binds[arg.name] = (col, typ)
        elif isinstance(arg, ast.Const):
            reads.constants.append((arg, col, typ))
        else:
            reads.checks.append((j, arg, col, typ))
    return reads
