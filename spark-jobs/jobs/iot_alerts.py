"""Streaming job: flag train sensors running hot or shaking, per 10-second event-time window.

Reads JSON readings ``{"sensor_id", "train_id", "ts" (epoch ms), "temperature", "vibration"}`` from
a Strom topic, groups them by sensor into tumbling 10-second windows of *event time* with a
watermark (late readings up to ``--watermark`` are still counted; a window's result is final,
and emitted once, when the watermark passes its end), and writes one alert per window whose
maximum temperature or vibration is above the threshold to another topic, keyed by sensor id:

    {"sensor_id", "train_id", "window_start", "window_end", "max_temperature", "max_vibration",
     "readings", "reasons": ["temperature", "vibration"]}

Locally (the same code runs on Kubernetes, see spark-jobs/k8s/):

    uv run python spark-jobs/jobs/iot_alerts.py --bootstrap 127.0.0.1:9092 --master 'local[*]' \\
        --checkpoint /tmp/iot-checkpoint
"""

from __future__ import annotations

import argparse
from typing import Any

READING_SCHEMA = (
    "sensor_id STRING, train_id STRING, ts LONG, temperature DOUBLE, vibration DOUBLE"
)


def build_alerts(readings: Any, *, temperature_threshold: float, vibration_threshold: float,
                 window: str = "10 seconds", watermark: str = "20 seconds") -> Any:
    """Raw strom rows -> alert rows ``(key, value)`` ready for the strom sink."""
    from pyspark.sql import functions as F

    parsed = (
        readings.select(F.from_json(F.col("value").cast("string"), READING_SCHEMA).alias("r"))
        .select("r.*")
        .where(F.col("sensor_id").isNotNull() & F.col("ts").isNotNull())
        .withColumn("event_time", F.timestamp_millis("ts"))
    )
    per_window = (
        parsed.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window).alias("w"), "sensor_id")
        .agg(
            F.max("train_id").alias("train_id"),
            F.max("temperature").alias("max_temperature"),
            F.max("vibration").alias("max_vibration"),
            F.count("*").alias("readings"),
        )
    )
    reasons = F.filter(
        F.array(
            F.when(F.col("max_temperature") > temperature_threshold, F.lit("temperature")),
            F.when(F.col("max_vibration") > vibration_threshold, F.lit("vibration")),
        ),
        lambda x: x.isNotNull(),
    )
    alerts = per_window.withColumn("reasons", reasons).where(F.size("reasons") > 0)
    return alerts.select(
        F.col("sensor_id").cast("binary").alias("key"),
        F.to_json(
            F.struct(
                "sensor_id",
                "train_id",
                F.date_format("w.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
                F.date_format("w.end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
                "max_temperature",
                "max_vibration",
                "readings",
                "reasons",
            )
        ).alias("value"),
    )


def start_query(spark: Any, args: argparse.Namespace) -> Any:
    reader = (
        spark.readStream.format("strom")
        .option("bootstrap.servers", args.bootstrap)
        .option("subscribe", args.readings_topic)
        .option("startingOffsets", args.starting_offsets)
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    alerts = build_alerts(
        reader.load(),
        temperature_threshold=args.temperature_threshold,
        vibration_threshold=args.vibration_threshold,
        window=args.window,
        watermark=args.watermark,
    )
    writer = (
        alerts.writeStream.format("strom")
        .outputMode("append")
        .option("bootstrap.servers", args.bootstrap)
        .option("topic", args.alerts_topic)
        .option("checkpointLocation", args.checkpoint)
        .queryName("iot-alerts")
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger)
    return writer.start()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True,
                   help="Strom bootstrap, e.g. my-cluster-bootstrap.strom.svc:9092")
    p.add_argument("--master", default=None,
                   help="e.g. local[*]; omit under spark-submit / the Spark Operator")
    p.add_argument("--readings-topic", default="sensor-readings")
    p.add_argument("--alerts-topic", default="sensor-alerts")
    p.add_argument("--checkpoint", required=True, help="checkpoint dir (a PVC or s3a:// on K8s)")
    p.add_argument("--temperature-threshold", type=float, default=90.0)
    p.add_argument("--vibration-threshold", type=float, default=6.0)
    p.add_argument("--window", default="10 seconds")
    p.add_argument("--watermark", default="20 seconds")
    p.add_argument("--starting-offsets", default="latest")
    p.add_argument("--max-offsets-per-trigger", type=int, default=0)
    p.add_argument("--trigger", default="5 seconds", help="processing-time trigger interval")
    p.add_argument("--available-now", action="store_true",
                   help="process what is there now, then stop (Trigger.AvailableNow)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import spark_session

    args = parse_args(argv)
    spark = spark_session("strom-iot-alerts", args.master, args.conf)
    query = start_query(spark, args)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
