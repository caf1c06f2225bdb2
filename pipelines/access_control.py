"""Code location: `rules/access_control.pomo` as hourly-partitioned Dagster assets."""

from dagster import HourlyPartitionsDefinition

from pipelines._common import example

defs = example("access_control", HourlyPartitionsDefinition(start_date="2023-11-14-22:00"))
