"""What to read: partitions, offset ranges, rate limits, splits and data-loss decisions. Pure.

Every function takes what the cluster said (partition counts, earliest and latest offsets, offsets
for timestamps) as plain mappings and returns plain values, so the whole of the connector's
decision making is unit-tested without Spark or brokers; ``source.py`` does the I/O and calls in.

The rules follow Spark's Kafka source where it has one:

* a streaming offset is the next offset to read; micro-batch ``n`` reads ``[start, end)`` and
  batch ``n+1`` starts at ``end`` (so a restart from the checkpoint re-plans the same ranges);
* partitions that appear while a query runs (a topic grows, a pattern matches a new topic) start
  at their earliest offset. We first *introduce* them into the offsets at their earliest offset and
  read them from the next micro-batch on, so every range is fixed by checkpointed offsets alone;
* ``maxOffsetsPerTrigger`` is shared among partitions in proportion to their backlog (largest
  remainder, so the total is exactly the limit and never more);
* ``minPartitions`` splits ranges in proportion to their size, never into empty pieces;
* offsets below the log start (deleted by retention), above the log end (topic re-created or
  truncated), or of partitions that vanished are *data loss*: an error naming the partitions and
  offsets when ``failOnDataLoss=true``, otherwise skipped with a warning.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from strom_spark.errors import StromDataLossError, StromOptionError, StromTopicError
from strom_spark.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition
from strom_spark.options import OffsetSpec, Subscription


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """``[start, end)`` of one partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.start}, {self.end})"


# --- which partitions ---------------------------------------------------------------------------


def select_partitions(
    sub: Subscription, partition_counts: Mapping[str, int], *, strict: bool = True
) -> list[TopicPartition]:
    """The partitions the subscription covers on a cluster with these topics.

    ``strict`` (query start, batch planning): a subscribed topic or assigned partition that does
    not exist is a :class:`StromTopicError`. A pattern matching nothing is not an error (topics may
    be created later). Non-strict (later micro-batches): missing ones are left out; the caller's
    data-loss check reports partitions that vanished.
    """
    out: list[TopicPartition] = []
    if sub.kind == "subscribe":
        missing = [t for t in sub.topics if t not in partition_counts]
        if missing and strict:
            raise StromTopicError(
                f"topic(s) {', '.join(repr(t) for t in missing)} of option subscribe do not exist "
                f"on the cluster (existing: {', '.join(sorted(partition_counts)) or 'none'})"
            )
        for topic in sub.topics:
            out.extend(TopicPartition(topic, p) for p in range(partition_counts.get(topic, 0)))
    elif sub.kind == "subscribePattern":
        for topic in sorted(partition_counts):
            if not topic.startswith("__") and sub.matches(topic):
                out.extend(TopicPartition(topic, p) for p in range(partition_counts[topic]))
    else:
        for tp in sub.assigned:
            count = partition_counts.get(tp.topic)
            if count is None or tp.partition >= count:
                if strict:
                    what = (
                        f"topic {tp.topic!r} does not exist"
                        if count is None
                        else f"topic {tp.topic!r} has only {count} partition(s)"
                    )
                    raise StromTopicError(f"option assign names {tp}, but {what}")
                continue
            out.append(tp)
    return sorted(out)


# --- where to start / end -----------------------------------------------------------------------


def resolve_offsets(
    spec: OffsetSpec,
    partitions: Iterable[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    by_time: Mapping[TopicPartition, int | None] | None = None,
    *,
    option: str = "startingOffsets",
    timestamp_strategy: Literal["error", "latest"] = "error",
) -> PartitionOffsets:
    """Turn an :class:`OffsetSpec` into concrete offsets for ``partitions``.

    ``by_time`` holds, for timestamp specs, the first offset whose timestamp is >= the requested
    one (``None`` when no record is that new). Explicit offsets must cover every partition (as in
    Kafka: use -2 / -1 for "earliest" / "latest") and may not lie above the log end.
    """
    tps = sorted(partitions)
    if spec.kind == "earliest":
        return {tp: earliest[tp] for tp in tps}
    if spec.kind == "latest":
        return {tp: latest[tp] for tp in tps}
    if spec.kind in ("timestamp", "timestamps"):
        return _resolve_timestamps(spec, tps, latest, by_time or {}, timestamp_strategy)
    given = spec.offset_map()
    unknown = sorted(set(given) - set(tps))
    if unknown:
        raise StromTopicError(
            f"option {option} names {', '.join(str(tp) for tp in unknown)}, which do(es) not "
            "exist on the cluster"
        )
    missing = [tp for tp in tps if tp not in given]
    if missing:
        raise StromOptionError(
            f"option {option} gives explicit offsets but not for "
            f"{', '.join(str(tp) for tp in missing)}; give every partition an offset "
            "(-2 = earliest, -1 = latest)"
        )
    out: PartitionOffsets = {}
    for tp in tps:
        off = given[tp]
        if off == EARLIEST:
            out[tp] = earliest[tp]
        elif off == LATEST:
            out[tp] = latest[tp]
        elif off > latest[tp]:
            raise StromOptionError(
                f"option {option}: offset {off} for {tp} is beyond the partition's latest offset "
                f"{latest[tp]}"
            )
        else:
            out[tp] = off
    return out


def _resolve_timestamps(
    spec: OffsetSpec,
    tps: list[TopicPartition],
    latest: Mapping[TopicPartition, int],
    by_time: Mapping[TopicPartition, int | None],
    strategy: Literal["error", "latest"],
) -> PartitionOffsets:
    option = "startingTimestamp" if spec.kind == "timestamp" else "startingOffsetsByTimestamp"
    if spec.kind == "timestamps":
        stamps = spec.offset_map()
        missing = [tp for tp in tps if tp not in stamps]
        if missing:
            raise StromOptionError(
                f"option {option} has no timestamp for {', '.join(str(tp) for tp in missing)}; "
                "give every partition a timestamp"
            )
    out: PartitionOffsets = {}
    for tp in tps:
        found = by_time.get(tp)
        if found is None or found < 0:
            if strategy == "error":
                ts = spec.timestamp if spec.kind == "timestamp" else spec.offset_map()[tp]
                raise StromOptionError(
                    f"option {option}: {tp} has no record with a timestamp >= {ts}; set "
                    "startingOffsetsByTimestampStrategy=latest to start at the end instead"
                )
            out[tp] = latest[tp]
        else:
            out[tp] = found
    return out


def timestamps_to_look_up(
    spec: OffsetSpec, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The ``offsets_for_times`` query a timestamp spec needs (empty for other specs)."""
    if spec.kind == "timestamp":
        return {tp: spec.timestamp for tp in partitions}
    if spec.kind == "timestamps":
        stamps = spec.offset_map()
        return {tp: stamps[tp] for tp in partitions if tp in stamps}
    return {}


# --- data loss -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DataLoss:
    tp: TopicPartition
    wanted: int
    #: Where reading can resume: the log start offset, or -1 when the partition is gone.
    resume_at: int
    reason: str

    def describe(self) -> str:
        return f"{self.tp} offset {self.wanted}: {self.reason}"


def find_data_loss(
    start: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> list[DataLoss]:
    """Partitions whose next offset can no longer be read as it is."""
    losses: list[DataLoss] = []
    for tp in sorted(start):
        off = start[tp]
        if tp not in earliest:
            losses.append(DataLoss(tp, off, -1, "the partition no longer exists"))
        elif off < earliest[tp]:
            losses.append(
                DataLoss(
                    tp,
                    off,
                    earliest[tp],
                    f"offsets [{off}, {earliest[tp]}) were deleted (retention); the log now "
                    f"starts at {earliest[tp]}",
                )
            )
        elif off > latest[tp]:
            losses.append(
                DataLoss(
                    tp,
                    off,
                    earliest[tp],
                    f"the log now ends at {latest[tp]} (topic re-created or truncated?)",
                )
            )
    return losses


def data_loss_message(losses: Iterable[DataLoss], fail_on_data_loss: bool) -> str:
    details = "; ".join(loss.describe() for loss in losses)
    if fail_on_data_loss:
        return (
            f"data loss: {details}. Some data may have been lost because it is not available "
            "in Strom any more. If you want the query to continue, skipping what is gone, set "
            "the source option failOnDataLoss=false"
        )
    return f"data loss, skipping (failOnDataLoss=false): {details}"


def raise_on_data_loss(losses: list[DataLoss], fail_on_data_loss: bool) -> None:
    if losses and fail_on_data_loss:
        raise StromDataLossError(data_loss_message(losses, True))


# --- streaming: the end offset of the next micro-batch ------------------------------------------


def next_end_offsets(
    start: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    max_rows: int | None,
) -> PartitionOffsets:
    """The end offsets of the next micro-batch (the caller has handled data loss).

    ``latest`` holds every partition the subscription covers now. Partitions not yet in ``start``
    are introduced at their earliest offset (read from the next batch on); partitions in ``start``
    that vanished are dropped; the rest advance to ``latest``, within ``max_rows`` in total.
    """
    end: PartitionOffsets = {}
    avail: dict[TopicPartition, tuple[int, int]] = {}
    for tp in sorted(latest):
        if tp not in start:
            end[tp] = earliest[tp]
            continue
        begin = max(start[tp], earliest[tp])
        if latest[tp] > begin:
            avail[tp] = (begin, latest[tp])
        else:
            end[tp] = start[tp] if start[tp] <= latest[tp] else latest[tp]
    if max_rows is None:
        end.update({tp: b for tp, (_, b) in avail.items()})
    else:
        end.update(rate_limit(avail, max_rows))
    return end


def rate_limit(
    available: Mapping[TopicPartition, tuple[int, int]], max_rows: int
) -> PartitionOffsets:
    """Advance each ``(begin, latest)`` so the total is ``min(max_rows, backlog)``, pro rata."""
    sizes = {tp: b - a for tp, (a, b) in available.items()}
    total = sum(sizes.values())
    if total <= max_rows:
        return {tp: b for tp, (_, b) in available.items()}
    shares: dict[TopicPartition, int] = {}
    remainders: list[tuple[float, TopicPartition]] = []
    for tp in sorted(sizes):
        exact = max_rows * sizes[tp] / total
        shares[tp] = min(sizes[tp], math.floor(exact))
        remainders.append((exact - shares[tp], tp))
    left = max_rows - sum(shares.values())
    for _, tp in sorted(remainders, key=lambda r: (-r[0], r[1])):
        if left <= 0:
            break
        if shares[tp] < sizes[tp]:
            shares[tp] += 1
            left -= 1
    return {tp: available[tp][0] + shares[tp] for tp in sorted(available)}


# --- the ranges Spark's tasks read ---------------------------------------------------------------


def plan_ranges(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> list[OffsetRange]:
    """Non-empty ``[start, end)`` per partition present in both maps."""
    ranges = []
    for tp in sorted(end):
        if tp in start and end[tp] > start[tp]:
            ranges.append(OffsetRange(tp.topic, tp.partition, start[tp], end[tp]))
    return ranges


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Spark's ``minPartitions``: split big ranges so there are about ``min_partitions`` tasks."""
    if min_partitions is None or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    if total == 0:
        return list(ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(1, min(r.size, round(r.size / total * min_partitions)))
        for i in range(parts):
            a = r.start + r.size * i // parts
            b = r.start + r.size * (i + 1) // parts
            if b > a:
                out.append(OffsetRange(r.topic, r.partition, a, b))
    return out


def check_batch_bounds(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> None:
    """A batch query's start must not be after its end."""
    bad = [tp for tp in sorted(start) if tp in end and start[tp] > end[tp]]
    if bad:
        raise StromOptionError(
            "startingOffsets is after endingOffsets for "
            + ", ".join(f"{tp} ({start[tp]} > {end[tp]})" for tp in bad)
        )
