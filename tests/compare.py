"""Comparing what Spark derives with what the reference evaluator derives."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def rounded(values: tuple) -> tuple:
    """Floats to 9 places: Spark and the reference sum an average's terms in different orders,
    and a derived value (in the aggregates or carried on into a head) may differ in the last bit."""
    return tuple(round(v, 9) if isinstance(v, float) else v for v in values)


@contextmanager
def in_process(on: bool) -> Iterator[None]:
    """Within this block, small epochs' strata are worked out in this process when ``on``,
    else always by Spark's plans (`SparkEvaluator.in_process`)."""
    from dagster_pomo.engine.spark.evaluator import SparkEvaluator

    before = SparkEvaluator.IN_PROCESS_INPUTS
    SparkEvaluator.IN_PROCESS_INPUTS = 10**9 if on else 0
    try:
        yield
    finally:
        SparkEvaluator.IN_PROCESS_INPUTS = before
