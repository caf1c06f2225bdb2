"""Code location: `rules/login_streaks.pomo` as daily-partitioned Dagster assets (its `@next`
rules count days, so each epoch is a day)."""

from dagster import DailyPartitionsDefinition

from pipelines._common import example

defs = example("login_streaks", DailyPartitionsDefinition(start_date="2023-11-14"))
