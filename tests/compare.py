"""Comparing what Spark derives with what the reference evaluator derives."""

from __future__ import annotations


def rounded(values: tuple) -> tuple:
    """Floats to 9 places: Spark and the reference sum an average's terms in different orders,
    and a derived value (in the aggregates or carried on into a head) may differ in the last bit."""
    return tuple(round(v, 9) if isinstance(v, float) else v for v in values)
