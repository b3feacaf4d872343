"""PySpark data source ``strom``: read and write Strom topics from Spark, batch and streaming.

    import strom_spark
    strom_spark.register(spark)
    df = (spark.readStream.format("strom")
          .option("bootstrap.servers", "my-cluster-bootstrap.strom.svc:9092")
          .option("subscribe", "readings")
          .load())

Options and columns are those of Spark's Kafka source (see :mod:`strom_spark.options` and
:mod:`strom_spark.sink`); offsets live in Spark's checkpoint, so a restarted query resumes exactly
where it stopped. This module is the public front; everything else is private.
"""

from __future__ import annotations

from typing import Any

from strom_spark.errors import (
    StromDataLossError,
    StromOptionError,
    StromTopicError,
    StromWriteError,
)
from strom_spark.source import StromDataSource

__all__ = [
    "StromDataLossError",
    "StromDataSource",
    "StromOptionError",
    "StromTopicError",
    "StromWriteError",
    "register",
]


def register(spark: Any) -> None:
    """Make ``format("strom")`` available in ``spark`` (a ``SparkSession``)."""
    spark.dataSource.register(StromDataSource)
