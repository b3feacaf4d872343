"""Shared start-up for the example jobs: one SparkSession recipe for local runs and Kubernetes.

``--master local[*]`` (or any master) builds the session here; without ``--master`` the session
comes from ``spark-submit`` / the Spark Operator, which already set master and configs. Either way
the same job code runs, and the ``strom`` data source is registered.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def spark_session(app_name: str, master: str | None, conf: list[str] | None = None) -> Any:
    # Local runs: Python workers must use this interpreter (the one with strom_spark installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master and master.startswith("local"):
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import strom_spark

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
        if master.startswith("local"):
            builder = builder.config("spark.sql.shuffle.partitions", "4").config(
                "spark.ui.enabled", "false"
            )
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    for item in conf or []:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    strom_spark.register(spark)
    return spark
