"""Small epochs worked out in this process, with the semantics of the Spark plans: an
epoch's few rows cost far less than the Spark jobs, plans and analysis they would need."""
