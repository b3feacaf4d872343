"""Writing a DataFrame to Strom topics (batch ``df.write`` and streaming ``df.writeStream``).

Columns, as in Spark's Kafka sink: ``value`` (required; binary or string, null = tombstone),
``key`` (optional; binary or string), ``topic`` (string; or the ``topic`` option for rows whose
column is missing or null), ``partition`` (optional int; otherwise the key's murmur2 hash, or the
sticky partitioner for null keys), ``headers`` (optional ``array<struct<key string, value
binary>>``). Other columns are ignored. The schema is checked on the driver, when Spark asks for a
writer, so a missing ``value`` or a missing topic fails the query before any task runs.

Spark hands the rows to ``write()`` as Arrow batches (the Arrow writer classes); columns become
Python lists once per batch, not values once per row. Each task opens one Producer with
``acks=all`` and waits for every record's acknowledgement before it reports success; any failed
record fails the task.

Delivery guarantee — at-least-once, today. A task retried by Spark, or a micro-batch replayed
after a restart (Spark re-runs a batch whose commit was not recorded), sends its rows again.
Exactly-once output per micro-batch needs two broker features that come later: the idempotent
producer (producer id + sequence numbers: removes duplicates from the producer's own retries) and
transactions. With them, the stream writer will open a transaction per task keyed on
``(query id, partition id)`` and commit all of a micro-batch's transactions from ``commit(batchId)``
on the driver, recording ``batchId`` with them; a replayed batch id is then aborted instead of
written twice, so readers using read_committed see each micro-batch exactly once. Until then, make
consumers idempotent (e.g. key the output and deduplicate on it downstream).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from strom_spark.errors import StromOptionError, StromWriteError
from strom_spark.options import WriteOptions

log = logging.getLogger("strom_spark")


@dataclass
class StromCommitMessage(WriterCommitMessage):
    """What one write task reports to the driver."""

    records: int = 0
    #: ``"topic-partition" -> (first offset, last offset)`` acknowledged by the brokers.
    offsets: dict[str, tuple[int, int]] = field(default_factory=dict)


def _is_bytes_like(dt: DataType) -> bool:
    return isinstance(dt, BinaryType | StringType)


def _headers_ok(dt: DataType) -> bool:
    if not isinstance(dt, ArrayType) or not isinstance(dt.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in dt.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and _is_bytes_like(fields["value"])
    )


def check_write_schema(schema: StructType, opts: WriteOptions) -> None:
    """Fail early, with the column's name, on a DataFrame the sink cannot write."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise StromWriteError(
            "the DataFrame written to strom needs a 'value' column (binary or string); "
            f"it has: {', '.join(schema.fieldNames())}"
        )
    for name in ("key", "value"):
        if name in types and not _is_bytes_like(types[name]):
            raise StromWriteError(
                f"column '{name}' must be binary or string, not {types[name].simpleString()}; "
                f"cast it, e.g. to_json(struct(*)).alias('{name}')"
            )
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise StromWriteError(
            f"column 'topic' must be a string, not {types['topic'].simpleString()}"
        )
    if "topic" not in types and opts.topic is None:
        raise StromOptionError(
            "no topic to write to: add a 'topic' column to the DataFrame or set the option "
            "topic, e.g. .option('topic', 'alerts')"
        )
    if "partition" in types and not isinstance(
        types["partition"], IntegerType | LongType | ShortType
    ):
        raise StromWriteError(
            f"column 'partition' must be an integer, not {types['partition'].simpleString()}"
        )
    if "headers" in types and not _headers_ok(types["headers"]):
        raise StromWriteError(
            "column 'headers' must be array<struct<key: string, value: binary>>, not "
            f"{types['headers'].simpleString()}"
        )


def _as_bytes(values: list[Any]) -> list[bytes | None]:
    return [v.encode() if isinstance(v, str) else v for v in values]


def write_batches(opts: WriteOptions, batches: Iterator[pa.RecordBatch]) -> StromCommitMessage:
    """Send every row of ``batches``; return once all are acknowledged (or raise)."""
    from strom.client import Producer

    producer = Producer(
        opts.bootstrap_servers,
        acks="all",
        linger_ms=opts.linger_ms,
        batch_size=opts.batch_size,
        compression_type=opts.compression_type,
    )
    futures: list[Any] = []
    count = 0
    try:
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            cols = {name.lower(): i for i, name in enumerate(batch.schema.names)}

            def column(name: str, cols: dict[str, int] = cols, batch: pa.RecordBatch = batch,
                       n: int = n) -> list[Any]:
                i = cols.get(name)
                return [None] * n if i is None else batch.column(i).to_pylist()

            values = _as_bytes(column("value"))
            keys = _as_bytes(column("key"))
            topics = column("topic")
            parts = column("partition")
            headers = column("headers")
            send = producer.send
            default_topic = opts.topic
            for i in range(n):
                topic = topics[i] or default_topic
                if topic is None:
                    raise StromWriteError(
                        f"row {count + i} has a null 'topic' and no option topic is set"
                    )
                hdrs = headers[i]
                futures.append(
                    send(
                        topic,
                        values[i],
                        keys[i],
                        partition=parts[i],
                        headers=None
                        if not hdrs
                        else [
                            (h["key"], h["value"].encode() if isinstance(h["value"], str)
                             else h["value"])
                            for h in hdrs
                        ],
                    )
                )
            count += n
        producer.flush()
        offsets: dict[str, tuple[int, int]] = {}
        for fut in futures:
            exc = fut.exception()
            if exc is not None:
                raise StromWriteError(f"writing to strom failed: {exc}") from exc
            meta = fut.result()
            key = f"{meta.topic}-{meta.partition}"
            lo, hi = offsets.get(key, (meta.offset, meta.offset))
            offsets[key] = (min(lo, meta.offset), max(hi, meta.offset))
        return StromCommitMessage(records=count, offsets=offsets)
    finally:
        producer.close()


class StromBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_write_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, StromCommitMessage))
        log.info("strom write committed: %d records", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        written = sum(m.records for m in messages if isinstance(m, StromCommitMessage))
        log.warning(
            "strom write aborted; %d records of successful tasks are already in the topic "
            "(no transactions yet: see strom_spark.sink)",
            written,
        )


class StromStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_write_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, StromCommitMessage))
        log.info("strom micro-batch %d committed: %d records", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        written = sum(m.records for m in messages if isinstance(m, StromCommitMessage))
        log.warning(
            "strom micro-batch %d aborted; %d records of successful tasks are already in the "
            "topic and will be written again when the batch is retried (at-least-once)",
            batchId,
            written,
        )
