"""Writing a DataFrame to Strom topics (batch ``df.write`` and streaming ``df.writeStream``).

Columns, as in Spark's Kafka sink: ``value`` (required; binary or string, null = tombstone),
``key`` (optional; binary or string), ``topic`` (string; or the ``topic`` option for rows whose
column is missing or null), ``partition`` (optional int; otherwise the key's murmur2 hash, or the
sticky partitioner for null keys), ``headers`` (optional ``array<struct<key string, value
binary>>``). Other columns are ignored. The schema is checked on the driver, when Spark asks for a
writer, so a missing ``value`` or a missing topic fails the query before any task runs.

Spark hands the rows to ``write()`` as Arrow batches (the Arrow writer classes); columns become
Python lists once per batch, not values once per row. Each task opens one idempotent Producer
(``acks=all``, ``enable_idempotence=True``: the broker drops the duplicates of the producer's own
retries and keeps each partition's records in send order, across leader failovers of replicated
topics) and waits for every record's acknowledgement before it reports success; any failed record
fails the task.

Delivery guarantees, precisely:

* **Batch writes (``df.write``): at least once.** A task that fails after some of its records were
  acknowledged and is retried by Spark writes those records again; a failed job leaves the
  records of its successful tasks in the topics. No duplicates come from network retries.
* **Streaming (``df.writeStream``): a committed micro-batch is never written again, keyed on the
  batch id.** Spark re-runs the last micro-batch after a restart when its entry in the
  checkpoint's ``commits/`` log is missing, including when the driver stopped *after* the sink's
  ``commit(batchId)`` — a naive sink writes that batch twice. Here ``commit(messages, batchId)``
  on the driver records ``(query id, batchId)`` in a compacted marker topic (option
  ``commitTopic``, default ``__strom_spark_commits``; see :mod:`strom_spark.markers`), and every
  task first looks up its query's newest marker (one small read per task) and writes nothing when
  its batch is already there. The query id is Spark's ``StreamingQuery.id``, which the checkpoint
  keeps across restarts; a new checkpoint is a new query.
* **Not covered — duplicates remain possible (at least once) in two cases:** (1) a task that
  failed after part of its rows were acknowledged and was retried within the same micro-batch
  (or a speculative duplicate attempt) writes those rows again; (2) a driver that stopped after
  some tasks of batch ``N`` wrote but before ``commit(N)`` replays batch ``N`` in full. Removing
  these needs broker transactions (records invisible until the batch commits), which Strom does
  not have. Until then every streamed record carries the headers ``strom.spark.query``,
  ``strom.spark.batch`` and ``strom.spark.writer`` (one id per task attempt), and the batch's
  marker lists the writers of its committed output: a consumer that holds back a batch's records
  until its marker arrives and keeps only those whose writer the marker lists reads each
  micro-batch exactly once (markers of older batches are eventually compacted away, so such a
  consumer must follow the marker topic as it goes). Simpler alternative: key the output and
  deduplicate downstream.
* With ``commitMarkers=false``, or where Spark gives the task no query id (it always does for
  micro-batch queries), nothing is recorded or checked and a replayed batch is written again.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterator, Sequence
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
from strom_spark.markers import CommitMarker, already_committed, batch_headers
from strom_spark.options import WriteOptions

log = logging.getLogger("strom_spark")

#: Local properties Spark's micro-batch execution sets on every job of a batch; Python tasks see
#: them through ``TaskContext.getLocalProperty``.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class StromCommitMessage(WriterCommitMessage):
    """What one write task reports to the driver."""

    records: int = 0
    #: ``"topic-partition" -> (first offset, last offset)`` acknowledged by the brokers.
    offsets: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Streaming: the task's query, micro-batch and writer id (None for batch writes).
    query: str | None = None
    batch: int | None = None
    writer: str | None = None
    #: Streaming: the batch was already committed (a replay), so the task wrote nothing.
    skipped: bool = False


@dataclass(frozen=True, slots=True)
class TaskBatch:
    """Which micro-batch of which query a streaming write task belongs to, and its writer id."""

    query: str
    batch: int
    writer: str


def current_task_batch() -> TaskBatch | None:
    """The running task's query and batch, from Spark's local properties (None outside one)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None
    query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
    if not query or not batch:
        return None
    try:
        batch_id = int(batch)
    except ValueError:
        return None
    # unique per task attempt, including attempts of the same task in an earlier run
    writer = f"{ctx.partitionId()}.{ctx.attemptNumber()}.{secrets.token_hex(4)}"
    return TaskBatch(query, batch_id, writer)


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


def write_batches(
    opts: WriteOptions,
    batches: Iterator[pa.RecordBatch],
    extra_headers: Sequence[tuple[str, bytes]] = (),
) -> StromCommitMessage:
    """Send every row of ``batches`` (each with ``extra_headers`` appended to its own); return
    once all are acknowledged (or raise)."""
    from strom.client import Producer

    producer = Producer(
        opts.bootstrap_servers,
        acks="all",
        enable_idempotence=True,
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
            extra = list(extra_headers)
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
                        headers=(extra or None)
                        if not hdrs
                        else [
                            (h["key"], h["value"].encode() if isinstance(h["value"], str)
                             else h["value"])
                            for h in hdrs
                        ] + extra,
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
            "(no transactions: see strom_spark.sink)",
            written,
        )


class StromStreamWriter(DataSourceStreamArrowWriter):
    """Micro-batch writer; see the module docstring for what is and is not written once."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_write_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        task = current_task_batch()
        if task is None:
            log.warning("strom stream write without a streaming query id: no commit marker "
                        "check, no batch headers (at-least-once)")
            return write_batches(self.opts, iterator)
        if self.opts.commit_markers:
            from strom_spark.commit_log import last_marker

            marker = last_marker(self.opts.bootstrap_servers, self.opts.commit_topic, task.query)
            if already_committed(task.batch, marker):
                # drain the input: Spark's Python worker expects the whole stream to be read
                rows = sum(b.num_rows for b in iterator)
                log.info("strom micro-batch %d of query %s was committed before (marker in "
                         "%s); this replay writes nothing (%d rows skipped)",
                         task.batch, task.query, self.opts.commit_topic, rows)
                return StromCommitMessage(query=task.query, batch=task.batch,
                                          writer=task.writer, skipped=True)
        msg = write_batches(self.opts, iterator,
                            batch_headers(task.query, task.batch, task.writer))
        msg.query, msg.batch, msg.writer = task.query, task.batch, task.writer
        return msg

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        msgs = [m for m in messages if isinstance(m, StromCommitMessage)]
        total = sum(m.records for m in msgs)
        queries = {m.query for m in msgs if m.query}
        if not self.opts.commit_markers or not queries:
            log.info("strom micro-batch %d committed: %d records (no marker)", batchId, total)
            return
        if len(queries) > 1:
            raise StromWriteError(
                f"micro-batch {batchId}: tasks report different query ids {sorted(queries)}"
            )
        query = queries.pop()
        for m in msgs:
            if m.batch is not None and m.batch != batchId:
                log.warning("strom micro-batch %d: a task reported batch %d", batchId, m.batch)
        written = [m for m in msgs if not m.skipped]
        if not written:
            log.info("strom micro-batch %d of query %s: replay of a committed batch, nothing "
                     "written, marker kept", batchId, query)
            return
        from strom_spark.commit_log import last_marker, record_commit

        writers = tuple(m.writer for m in written if m.writer)
        if len(written) < len(msgs):
            # Cannot happen while batch ids are committed in order (a marker for this batch is
            # only written once all its tasks succeeded); keep the earlier writers if it does.
            log.warning("strom micro-batch %d of query %s: some tasks found the batch committed "
                        "and others wrote; recording it again", batchId, query)
            before = last_marker(self.opts.bootstrap_servers, self.opts.commit_topic, query)
            if before is not None and before.batch == batchId:
                writers = before.writers + writers
        marker = CommitMarker(
            query=query,
            batch=batchId,
            records=total,
            writers=writers,
            committed_at_ms=int(time.time() * 1000),
        )
        record_commit(self.opts.bootstrap_servers, self.opts.commit_topic, marker)
        log.info("strom micro-batch %d of query %s committed: %d records, marker in %s",
                 batchId, query, total, self.opts.commit_topic)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        written = sum(m.records for m in messages if isinstance(m, StromCommitMessage))
        log.warning(
            "strom micro-batch %d aborted; %d records of successful tasks are already in the "
            "topic and will be written again when the batch is retried (no marker was "
            "recorded; consumers can drop them by their strom.spark.writer header)",
            batchId,
            written,
        )
