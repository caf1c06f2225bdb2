"""Benchmarks of dagster-pomo against peers on the same machine: see BENCHMARKS.md."""
