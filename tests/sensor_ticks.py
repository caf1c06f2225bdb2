"""One tick of a corpus's landing sensor, as the Dagster daemon would evaluate it."""

from __future__ import annotations

from typing import Any


def sensor_tick(defs: Any, instance: Any, storage: Any, cursor: str | None) -> Any:
    """The landing sensor of ``defs`` evaluated once from ``cursor``."""
    from dagster import build_sensor_context

    (watch,) = defs.sensors
    context = build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"storage": storage},
        repository_def=defs.get_repository_def(),
    )
    return watch.evaluate_tick(context)
