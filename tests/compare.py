"""Comparing what Spark derives with what the reference evaluator derives."""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable

from dagster_pomo.engine.policy import DEFAULT, Policy


def rounded(values: tuple) -> tuple:
    """Floats to 9 places: Spark and the reference sum an average's terms in different orders,
    and a derived value (in the aggregates or carried on into a head) may differ in the last bit."""
    return tuple(round(v, 9) if isinstance(v, float) else v for v in values)


def policy(in_process: bool, one_pass: bool = True, scans: bool = False) -> Policy:
    """How a test runs the Spark engine: small epochs' strata worked out in this process
    when ``in_process``, else always by Spark's plans (`LocalStrata.takes`); a range
    of epochs in one pass where it can when ``one_pass``, else epoch by epoch; the stored
    epochs Spark's plans read come to them through Spark's scans of their files when
    ``scans``, else, being few, as local relations (`Policy.plan_rows`)."""
    few = 0 if scans else DEFAULT.plan_rows
    return Policy(one_pass=one_pass, in_process_inputs=10**9 if in_process else 0, plan_rows=few)


def window_versions(lines: Iterable[str], life: int, until: int) -> int:
    """How many versions the water tanks' `level_10m` (a sliding window of ``life`` over each
    tank's readings) makes from the landing ``lines`` before ``until``, worked out apart from
    every engine (docs/semantics.md, "Aggregates over versions"): per tank, one at each
    distinct reading time and one at each distinct expiry while a reading is still alive."""
    times: dict[str, list[int]] = {}
    for line in lines:
        event = json.loads(line)
        if event["relation"] == "water_level":
            times.setdefault(event["args"]["tank"], []).append(int(event["t"]))
    total = 0
    for ts in times.values():
        ts.sort()
        changes = {t for t in ts if t < until} | {t + life for t in ts if t + life < until}
        # alive at x: a reading made in (x - life, x]
        total += sum(
            bisect.bisect_right(ts, x) > bisect.bisect_right(ts, x - life) for x in changes
        )
    return total
