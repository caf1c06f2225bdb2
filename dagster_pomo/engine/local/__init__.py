"""The local executor: plans executed over numpy columns, with no Spark job.

In this process it works out whole strata of small epochs and recursions over few rows
(`stratum`, `rules`, `exprs`), where Spark's jobs, plans and analysis would cost far more
than the rows. Inside Spark's tasks it runs what Spark has no operator for: a linear
recursion's rounds (`linear_fixpoint`) and an aggregate's sliding windows
(`sliding_aggregates`). Both places join, group and merge through `column_joins`.
"""
