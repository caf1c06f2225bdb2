"""DataFrames built on the driver, in the form Spark plans best.

Spark cannot see how big an RDD is, so a frame made from Python rows through an
RDD stops every join with it from being broadcast, and an empty one stays in
plans as a scan. Rows go over as a local relation (an Arrow table built column by
column, a quarter of the time pandas takes), whose size Spark knows; an empty
frame is a filter that is always false, which the optimizer removes together
with the unions and joins it takes part in.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType


def empty(spark: SparkSession, struct: StructType) -> DataFrame:
    """No rows, with the columns of ``struct``."""
    return (
        spark.range(1)
        .filter(F.lit(False))
        .select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in struct.fields])
    )


def arrow_table(rows: Sequence[tuple], struct: StructType) -> pa.Table:
    """``rows`` (tuples in the order of ``struct``) as an Arrow table of ``struct``'s types."""
    schema = to_arrow_schema(struct)
    columns = [pa.array([r[i] for r in rows], type=f.type) for i, f in enumerate(schema)]
    return pa.Table.from_arrays(columns, schema=schema)


def local(spark: SparkSession, rows: Sequence[tuple], struct: StructType) -> DataFrame:
    """``rows`` (tuples in the order of ``struct``) as a local relation."""
    return local_table(spark, arrow_table(rows, struct), struct)


def local_table(spark: SparkSession, table: pa.Table, struct: StructType) -> DataFrame:
    """``table`` (of ``struct``'s columns and types) as a local relation; given its schema,
    Spark need not work it out from Arrow's. In one piece: PySpark 4.3 drops the rows
    after an empty batch that is not the first (a table read from several epochs, one of
    them empty, or put together from several parts)."""
    if not table.num_rows:
        return empty(spark, struct)
    return spark.createDataFrame(table.combine_chunks(), struct)
