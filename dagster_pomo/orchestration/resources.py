"""Dagster resources: where Spark runs and where the warehouse and landing files live."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster import ConfigurableResource
from pydantic import Field

from dagster_pomo.engine.spark.session import SparkSettings, spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkResource(ConfigurableResource):
    """The Spark session: local by default, a master URL or a Spark Connect URL otherwise."""

    master: str = Field(default="local[*]", description="Spark master URL")
    remote: str | None = Field(default=None, description="Spark Connect URL (wins over master)")
    conf: dict[str, str] = Field(default_factory=dict, description="extra Spark configuration")

    def get_session(self) -> SparkSession:
        return spark_session(SparkSettings(master=self.master, remote=self.remote, conf=self.conf))


class PomoStorage(ConfigurableResource):
    """The warehouse root (any Spark-readable URI) and the landing location of input events."""

    warehouse: str = Field(description="root of the Parquet warehouse")
    landing: str = Field(description="folder of JSON Lines landing files")
