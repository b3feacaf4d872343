"""Batch job: per-key daily aggregates of a Strom topic, written to Parquet partitioned by day.

For every (day, key) — the day of the record timestamp, UTC — it computes the record count,
payload bytes, first and last timestamp and, with ``--value-field F``, min / avg / max of the
numeric JSON field ``F`` of the value (e.g. ``temperature`` for the IoT readings). Days are
overwritten as a whole (dynamic partition overwrite), so re-running a day is idempotent.

    uv run python spark-jobs/jobs/daily_aggregates.py --bootstrap 127.0.0.1:9092 \\
        --master 'local[*]' --topic sensor-readings --value-field temperature --out /tmp/daily
"""

from __future__ import annotations

import argparse
from typing import Any


def build_aggregates(records: Any, value_field: str | None = None) -> Any:
    from pyspark.sql import functions as F

    df = records.select(
        F.coalesce(F.col("key").cast("string"), F.lit("")).alias("key"),
        F.col("value"),
        F.col("timestamp"),
        F.to_date("timestamp").alias("day"),
    )
    aggs = [
        F.count("*").alias("records"),
        F.sum(F.coalesce(F.length("value"), F.lit(0))).alias("bytes"),
        F.min("timestamp").alias("first_timestamp"),
        F.max("timestamp").alias("last_timestamp"),
    ]
    if value_field:
        field = F.get_json_object(F.col("value").cast("string"), f"$.{value_field}").cast(
            "double"
        )
        df = df.withColumn("field", field)
        aggs += [
            F.min("field").alias(f"min_{value_field}"),
            F.avg("field").alias(f"avg_{value_field}"),
            F.max("field").alias(f"max_{value_field}"),
        ]
    return df.groupBy("day", "key").agg(*aggs)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--master", default=None, help="e.g. local[*]; omit under spark-submit")
    p.add_argument("--topic", required=True)
    p.add_argument("--out", required=True, help="Parquet output directory (or s3a:// path)")
    p.add_argument("--value-field", default=None, help="numeric JSON field to summarise")
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--ending-offsets", default="latest")
    p.add_argument("--min-partitions", type=int, default=0)
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    return p.parse_args(argv)


def run(spark: Any, args: argparse.Namespace) -> Any:
    reader = (
        spark.read.format("strom")
        .option("bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .option("endingOffsets", args.ending_offsets)
    )
    if args.min_partitions:
        reader = reader.option("minPartitions", str(args.min_partitions))
    aggregates = build_aggregates(reader.load(), args.value_field)
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    aggregates.write.mode("overwrite").partitionBy("day").parquet(args.out)
    return aggregates


def main(argv: list[str] | None = None) -> int:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import spark_session

    args = parse_args(argv)
    spark = spark_session("strom-daily-aggregates", args.master, args.conf)
    run(spark, args)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
