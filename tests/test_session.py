"""How the one Spark session is configured."""

from __future__ import annotations

from dagster_pomo.engine.spark.session import DEFAULT_CONF, SparkSettings, session_conf


def test_a_connect_server_is_sent_session_settings_only() -> None:
    """A Spark Connect server fixed its JVM, UI and console when it started; sending it
    the local defaults for those only makes Spark warn on every run. Session defaults
    and everything the user asks for still go."""
    local = session_conf(SparkSettings())
    assert local == DEFAULT_CONF
    remote = session_conf(SparkSettings(remote="sc://spark:15002"))
    assert remote["spark.sql.session.timeZone"] == "UTC"
    assert remote["spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version"] == "2"
    for launch_only in ("spark.driver.memory", "spark.ui.enabled", "spark.default.parallelism"):
        assert launch_only in local and launch_only not in remote
    assert session_conf(SparkSettings(remote="local")) == local, "a server started here"
    mine = {"spark.driver.memory": "8g", "spark.sql.shuffle.partitions": "16"}
    asked = session_conf(SparkSettings(remote="sc://spark:15002", conf=mine))
    assert asked["spark.driver.memory"] == "8g" and asked["spark.sql.shuffle.partitions"] == "16"
