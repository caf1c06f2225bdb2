"""Keep Catalyst's size estimates of a fixpoint's stored pieces from compounding.

A checkpointed frame keeps the size estimate of the plan it came from, and Catalyst
estimates a join as the product of its sides. In a recursion whose rule joins the
recursive relation with itself (``c(x + 1, n) := c(x, _) ^ c(_, n)``), each round's piece
is estimated as the square of the round before: the estimate's digits double every round,
and after thirty rounds planning a round multiplies numbers of millions of digits. An
estimate beyond 2^63 bytes means nothing anyway: such a piece is given Spark's default
("unknown, large") instead, which is where the estimate was already.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from dagster_pomo.engine.spark.lookups import is_connect

BOUND = 1 << 63  # bytes: Spark's own default for a relation it knows nothing of


def bounded(piece: DataFrame) -> DataFrame:
    """``piece`` (a checkpointed frame) with its size estimate forgotten when it exceeds
    :data:`BOUND`; otherwise ``piece`` itself. Spark Connect keeps plans on its server,
    out of reach: there ``piece`` is returned as it is."""
    spark = piece.sparkSession
    if is_connect(spark):
        return piece
    plan = piece._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() != "LogicalRDD" or _estimate(plan) < BOUND:
        return piece
    jvm = spark._jvm
    companion = getattr(jvm.org.apache.spark.sql.execution, "LogicalRDD$").__getattr__("MODULE$")
    none = jvm.scala.Option.empty()
    session = spark._jsparkSession
    forgotten = companion.apply(
        plan.output(),
        plan.rdd(),
        plan.outputPartitioning(),  # kept: later joins rely on how the piece is laid out
        plan.outputOrdering(),
        plan.isStreaming(),
        plan.stream(),
        session,
        none,  # no estimate: Spark's default
        none,
        True,  # from a checkpoint
    )
    return DataFrame(jvm.org.apache.spark.sql.classic.Dataset.ofRows(session, forgotten), spark)


def _estimate(plan: object) -> int:
    """The plan's size estimate in bytes. Every piece of a fixpoint passes through
    :func:`bounded`, so an estimate here is at most a few of them multiplied: a small number
    of digits."""
    return int(plan.stats().sizeInBytes())  # type: ignore[attr-defined]
