"""Evaluation on Apache Spark: one DataFrame plan per rule, one Parquet partition per epoch."""
