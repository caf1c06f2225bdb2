"""A stored relation's columns as Spark's types, and its versions read into this process."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from dagster_pomo.engine.local.arrow_schemas import arrow_schema
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.engine.versions import Version, from_record
from dagster_pomo.lang.kinds import element_of
from dagster_pomo.plan.schema import META, PROV, Schema

_SPARK = {"int": LongType(), "float": DoubleType(), "str": StringType(), "bool": BooleanType()}


def collect_versions(df: DataFrame, schema: Schema) -> list[Version]:
    """The stored rows of ``df`` (a relation of ``schema``) as versions, in this process."""
    return [from_record(tuple(rec), schema) for rec in df.collect()]


def read_versions(wh: Warehouse, schema: Schema, keys: Sequence[str]) -> list[Version]:
    """The versions of the epochs ``keys`` of a relation of ``schema``, read by this process
    from a local warehouse's files (no Spark job)."""
    table = wh.read_table(schema.name, keys, arrow_schema(schema))
    return [from_record(tuple(r.values()), schema) for r in table.to_pylist()]


def _spark_type(typ: str) -> DataType:
    """A column type (a set's as an array) as Spark's."""
    element = element_of(typ)
    return _SPARK[typ] if element is None else ArrayType(_SPARK[element])


def struct_of(schema: Schema) -> StructType:
    """The stored columns of a relation as Spark's types (those of `arrow_schema`)."""
    fields = [StructField(c, _SPARK[t]) for c, t in zip(schema.columns, schema.types, strict=True)]
    fields += [StructField(f"_agg_{fn}", _spark_type(t)) for fn, _, t in schema.aggregates]
    fields += [StructField(m, LongType()) for m in META]
    if schema.provenance:
        fields.append(StructField(PROV, ArrayType(StringType())))
    return StructType(fields)
