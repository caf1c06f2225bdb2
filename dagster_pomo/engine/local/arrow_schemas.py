"""A stored relation's columns as Arrow types: what the warehouse's Parquet files hold,
whoever reads or writes them (this process, the local executor, Spark's tasks)."""

from __future__ import annotations

import pyarrow as pa

from dagster_pomo.lang.kinds import element_of
from dagster_pomo.plan.schema import META, PROV, Schema

ARROW = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}


def arrow_type(typ: str) -> pa.DataType:
    """A column type (a set's as a list) in Arrow."""
    element = element_of(typ)
    return ARROW[typ] if element is None else pa.list_(ARROW[element])


def arrow_schema(schema: Schema) -> pa.Schema:
    """The stored columns of a relation as Arrow types (those of Spark's ``struct_of``)."""
    fields = [pa.field(c, ARROW[t]) for c, t in zip(schema.columns, schema.types, strict=True)]
    fields += [pa.field(f"_agg_{fn}", arrow_type(t)) for fn, _, t in schema.aggregates]
    fields += [pa.field(m, pa.int64()) for m in META]
    if schema.provenance:
        fields.append(pa.field(PROV, pa.list_(pa.string())))
    return pa.schema(fields)
