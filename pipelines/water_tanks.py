"""Code location: `rules/water_tanks.pomo` as hourly-partitioned Dagster assets."""

from dagster import HourlyPartitionsDefinition

from pipelines._common import example

defs = example("water_tanks", HourlyPartitionsDefinition(start_date="2023-11-14-22:00"))
