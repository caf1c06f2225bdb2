"""Evaluation of checked programs: on Spark, and by a small pure-Python reference."""
