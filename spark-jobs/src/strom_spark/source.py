"""The ``strom`` data source: Spark's entry points, wired to planning (pure) and cluster (I/O).

Where each method runs matters for a Python data source:

* ``DataSource.__init__`` / ``schema`` / ``reader`` / ``streamReader`` / ``writer``: on the driver,
  in short-lived Python workers; the DataSource object is pickled between them.
* ``DataSourceReader.partitions``: on the driver; the same reader object is then pickled and
  shipped to the executors, which call ``read`` — so no connection is kept as an attribute.
* ``DataSourceStreamReader.initialOffset / latestOffset / partitions / commit / stop``: on the
  driver, in one long-lived Python process per query source, so the reader keeps a
  :class:`ClusterView` open between micro-batches. ``read`` runs on executors on a *fresh* reader
  built by ``streamReader()``, so the constructor does no I/O.

Exactly-once input: offsets are checkpointed by Spark before a micro-batch runs, and a restarted
query re-plans an unfinished batch with the identical ``start``/``end``; because ``read`` yields
exactly ``[start, end)`` of every partition, a query's input has no gaps and no duplicates.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from strom_spark.cluster import ClusterView, read_range
from strom_spark.offsets import PartitionOffsets, from_offset_dict, to_offset_dict
from strom_spark.options import ReadOptions, parse_read_options, parse_write_options
from strom_spark.planning import (
    OffsetRange,
    check_batch_bounds,
    data_loss_message,
    find_data_loss,
    next_end_offsets,
    plan_ranges,
    raise_on_data_loss,
    resolve_offsets,
    select_partitions,
    split_ranges,
    timestamps_to_look_up,
)
from strom_spark.rows import spark_schema, to_record_batch, to_tuples
from strom_spark.sink import StromBatchWriter, StromStreamWriter

log = logging.getLogger("strom_spark")


class StromPartition(InputPartition):
    """One Spark task: an offset range of one topic-partition."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng

    def __repr__(self) -> str:
        return f"StromPartition({self.range})"


class StromDataSource(DataSource):
    """``spark.read.format("strom")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "strom"

    def schema(self) -> StructType:
        headers = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return spark_schema(headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return StromBatchReader(parse_read_options(self.options, "batch"))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StromStreamReader(parse_read_options(self.options, "streaming"))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return StromBatchWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StromStreamWriter(parse_write_options(self.options), schema)


def _read_partition(opts: ReadOptions, partition: InputPartition) -> Iterator[Any]:
    """Shared ``read()``: exactly the partition's range, as Arrow batches (or tuples)."""
    assert isinstance(partition, StromPartition), partition
    rng = partition.range
    arrow = opts.read_format == "arrow"
    for chunk in read_range(
        opts.bootstrap_servers,
        rng,
        fail_on_data_loss=opts.fail_on_data_loss,
        fetch_max_bytes=opts.fetch_max_bytes,
    ):
        if arrow:
            yield to_record_batch(rng.topic, rng.partition, chunk, opts.include_headers)
        else:
            yield from to_tuples(rng.topic, rng.partition, chunk, opts.include_headers)


def _starting_offsets(
    view: ClusterView, opts: ReadOptions, strict: bool = True
) -> PartitionOffsets:
    counts = view.partition_counts()
    tps = select_partitions(opts.subscription, counts, strict=strict)
    earliest = view.earliest(tps)
    latest = view.latest(tps)
    by_time = view.offsets_for_times(timestamps_to_look_up(opts.starting, tps))
    start = resolve_offsets(
        opts.starting,
        tps,
        earliest,
        latest,
        by_time,
        option="startingOffsets",
        timestamp_strategy=opts.timestamp_strategy,
    )
    losses = find_data_loss(start, earliest, latest)
    raise_on_data_loss(losses, opts.fail_on_data_loss)
    for loss in losses:
        log.warning(data_loss_message([loss], False))
        start[loss.tp] = earliest[loss.tp]
    return start


class StromBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        with ClusterView(opts.bootstrap_servers) as view:
            start = _starting_offsets(view, opts)
            tps = sorted(start)
            end = resolve_offsets(
                opts.ending, tps, view.earliest(tps), view.latest(tps), option="endingOffsets"
            )
        check_batch_bounds(start, end)
        ranges = split_ranges(plan_ranges(start, end), opts.min_partitions)
        return [StromPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_partition(self.opts, partition)


class StromStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._view: ClusterView | None = None
        #: ``Trigger.AvailableNow``: the latest offsets when the query started; never read past.
        self._target: PartitionOffsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "_view": None, "_target": self._target}

    def _cluster(self) -> ClusterView:
        if self._view is None:
            self._view = ClusterView(self.opts.bootstrap_servers)
        return self._view

    def initialOffset(self) -> dict[str, Any]:
        return to_offset_dict(_starting_offsets(self._cluster(), self.opts))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def _current(self) -> tuple[PartitionOffsets, PartitionOffsets]:
        view = self._cluster()
        counts = view.partition_counts()
        tps = select_partitions(self.opts.subscription, counts, strict=False)
        return view.earliest(tps), view.latest(tps)

    def prepareForTriggerAvailableNow(self) -> None:
        _, self._target = self._current()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_offset_dict(start, "checkpointed offsets")
        earliest, latest = self._current()
        if self._target is not None:
            latest = {tp: min(off, self._target.get(tp, off)) for tp, off in latest.items()}
        losses = find_data_loss(begin, earliest, latest)
        raise_on_data_loss(losses, self.opts.fail_on_data_loss)
        for loss in losses:
            log.warning(data_loss_message([loss], False))
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = next_end_offsets(begin, earliest, latest, max_rows)
        return to_offset_dict(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        _, latest = self._current()
        return to_offset_dict(latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = plan_ranges(
            from_offset_dict(start, "micro-batch start offsets"),
            from_offset_dict(end, "micro-batch end offsets"),
        )
        return [StromPartition(r) for r in split_ranges(ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_partition(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # Spark's checkpoint is the source of truth; nothing to commit on the cluster

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None
