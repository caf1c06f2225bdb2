"""Code location: `rules/payments_fraud.pomo` as hourly-partitioned Dagster assets."""

from dagster import HourlyPartitionsDefinition

from pipelines._common import example

defs = example("payments_fraud", HourlyPartitionsDefinition(start_date="2023-11-14-22:00"))
