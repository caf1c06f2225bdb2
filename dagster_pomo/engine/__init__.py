"""Evaluation of checked programs: the epoch driver, on Spark's plans (`spark`) and the
local executor (`local`: small epochs in this process, a recursion's rounds in Spark's
tasks), and by a small pure-Python reference."""
