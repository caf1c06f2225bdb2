"""Evaluation of checked programs: on Spark (small epochs in this process, see
`inprocess`), and by a small pure-Python reference."""
