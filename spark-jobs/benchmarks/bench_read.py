"""Records/s a streaming query reads from a 4-partition Strom topic: Arrow batches vs tuples.

``read()`` of a Python data source may yield ``pyarrow.RecordBatch`` (what ``strom`` does by
default) or plain tuples (``readFormat=tuples``), which Spark converts value by value. This runs
the same Trigger.AvailableNow query (strom source -> ``noop`` sink) over the same topic in both
modes, alternating, and reports the best and median wall-clock rate and Spark's own
``processedRowsPerSecond``; Arrow is the row, tuples its peer. Prints a table, writes JSON.

    uv run python spark-jobs/benchmarks/bench_read.py --records 1000000 --repeats 3
    uv run python spark-jobs/benchmarks/bench_read.py --bootstrap 127.0.0.1:9092  # own broker
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


@contextlib.contextmanager
def broker_process(data_dir: Path) -> Iterator[str]:
    """A local broker for the run, started and stopped by :func:`strom.testing.running_broker`
    (the one launcher of local broker processes: readiness under a deadline, the log's tail on
    failure, stopped by PID)."""
    from strom.testing import running_broker

    with running_broker(data_dir) as broker:
        yield broker.bootstrap


def fill_topic(bootstrap: str, topic: str, records: int, value_size: int) -> float:
    from strom.client import Admin, Producer

    with Admin(bootstrap) as admin:
        admin.create_topic(topic, 4, 1)
    value = b"x" * value_size
    t0 = time.perf_counter()
    with Producer(bootstrap, acks=1, linger_ms=20) as producer:
        for i in range(records):
            producer.send(topic, value, b"k%d" % (i % 1000))
        producer.flush()
    return records / (time.perf_counter() - t0)


def run_query(spark: Any, bootstrap: str, topic: str, fmt: str, checkpoint: str) -> dict[str, Any]:
    df = (spark.readStream.format("strom").option("bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("readFormat", fmt).load())
    t0 = time.perf_counter()
    q = (df.writeStream.format("noop").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.perf_counter() - t0
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    spark_rate = rows / max(1e-9, sum(p["durationMs"].get("triggerExecution", 0)
                                      for p in progress) / 1000)
    return {"rows": rows, "wall_s": wall, "records_per_s": rows / wall,
            "spark_processed_rows_per_s": spark_rate}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default=None, help="use this broker (default: start one)")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--json", type=Path, default=RESULTS / "bench_read.json")
    args = p.parse_args(argv)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    tmp = Path(tempfile.mkdtemp(prefix="strom-bench-read-"))
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap or stack.enter_context(broker_process(tmp))
        topic = f"bench-read-{int(time.time())}"
        produce_rate = fill_topic(bootstrap, topic, args.records, args.value_size)
        print(f"topic {topic}: {args.records} records x {args.value_size} B in 4 partitions "
              f"(produced at {produce_rate:,.0f} records/s)")

        from pyspark.sql import SparkSession

        import strom_spark

        spark = (SparkSession.builder.master(args.master).appName("bench-read")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("WARN")
        strom_spark.register(spark)
        stack.callback(spark.stop)
        run_query(spark, bootstrap, topic, "arrow", str(tmp / "warmup"))  # JVM + workers warm

        runs: dict[str, list[dict[str, Any]]] = {"arrow": [], "tuples": []}
        for i in range(args.repeats):
            for fmt in ("arrow", "tuples"):
                r = run_query(spark, bootstrap, topic, fmt, str(tmp / f"cp-{fmt}-{i}"))
                assert r["rows"] == args.records, r
                runs[fmt].append(r)
                print(f"  run {i + 1} {fmt:6s} {r['records_per_s']:>12,.0f} records/s "
                      f"({r['wall_s']:.2f} s)")

    summary = {}
    for fmt, rs in runs.items():
        rates = [r["records_per_s"] for r in rs]
        summary[fmt] = {
            "best_records_per_s": max(rates),
            "median_records_per_s": statistics.median(rates),
            "median_spark_processed_rows_per_s": statistics.median(
                r["spark_processed_rows_per_s"] for r in rs),
            "runs": rs,
        }
    ratio = summary["arrow"]["median_records_per_s"] / summary["tuples"]["median_records_per_s"]
    print()
    print(f"{'read format':<12} {'best rec/s':>14} {'median rec/s':>14} {'spark rows/s':>14}"
          f" {'vs tuples':>10}")
    for fmt in ("arrow", "tuples"):
        s = summary[fmt]
        r = s["median_records_per_s"] / summary["tuples"]["median_records_per_s"]
        print(f"{fmt:<12} {s['best_records_per_s']:>14,.0f} {s['median_records_per_s']:>14,.0f}"
              f" {s['median_spark_processed_rows_per_s']:>14,.0f} {r:>9.2f}x")
    out = {
        "benchmark": "strom_spark streaming read, 4-partition topic, noop sink",
        "records": args.records, "value_size": args.value_size, "master": args.master,
        "repeats": args.repeats, "produce_records_per_s": produce_rate,
        "arrow_vs_tuples_median_ratio": ratio, "results": summary,
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                    "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                  time.gmtime())},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
