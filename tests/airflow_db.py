"""SQLite connection settings for the tests' own Airflow: the scheduler, the DAG processor,
the triggerer, the API server and a CLI command all write to one SQLite file, and
SQLite's default five-second wait for a lock is shorter than a scheduler's busy moment
(a ``backfill create`` failed on it with "database is locked"). Airflow imports this
dictionary by path (``[database] sql_alchemy_connect_args``)."""

CONNECT_ARGS: dict[str, object] = {"timeout": 120}
