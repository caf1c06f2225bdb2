"""Comparing what Spark derives with what the reference evaluator derives."""

from __future__ import annotations

from dagster_pomo.engine.policy import Policy


def rounded(values: tuple) -> tuple:
    """Floats to 9 places: Spark and the reference sum an average's terms in different orders,
    and a derived value (in the aggregates or carried on into a head) may differ in the last bit."""
    return tuple(round(v, 9) if isinstance(v, float) else v for v in values)


def policy(in_process: bool, one_pass: bool = True) -> Policy:
    """How a test runs the Spark engine: small epochs' strata worked out in this process
    when ``in_process``, else always by Spark's plans (`LocalStrata.chosen`); a range
    of epochs in one pass where it can when ``one_pass``, else epoch by epoch."""
    return Policy(one_pass=one_pass, in_process_inputs=10**9 if in_process else 0)
