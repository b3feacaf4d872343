"""Retention (``cleanup.policy=delete``): which oldest whole segments may be deleted.

Deleting whole files is what makes retention cheap, so the decision is made per segment, oldest
first, and always yields a prefix of the segment list. Three rules, as in Kafka, each a prefix; the
longest wins:

* ``retention.ms``: a segment whose newest record timestamp is older than ``now - retention.ms``.
  If every segment including the active one has expired and the active one holds data, the caller
  rolls a new empty active segment first and then deletes them all (Kafka does the same), so an
  idle topic does empty out.
* ``retention.bytes``: delete oldest closed segments while the partition stays at or above the
  limit without them. The active segment is never deleted for size.
* log start offset: a segment entirely below ``log_start_offset`` (after DeleteRecords or a
  truncation) is deleted.

This module is pure: segments in, a count out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from strom.storage.config import LogConfig


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    base_offset: int
    next_offset: int
    size: int
    newest_timestamp: int  # max record timestamp, or the segment's creation time if none


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    delete_count: int  # how many of the oldest segments to delete
    roll_active: bool  # roll first: the active segment is among them


def decide(segments: Sequence[SegmentInfo], config: LogConfig, now_ms: int,
           log_start_offset: int) -> RetentionDecision:
    n = len(segments)
    if n == 0:
        return RetentionDecision(0, False)
    closed = n - 1

    by_start = 0
    while by_start < closed and segments[by_start + 1].base_offset <= log_start_offset:
        by_start += 1

    by_time = 0
    roll = False
    if config.delete and config.retention_ms >= 0:
        limit = now_ms - config.retention_ms
        while by_time < n and segments[by_time].newest_timestamp < limit:
            by_time += 1
        if by_time == n:
            active = segments[-1]
            if active.size > 0:
                roll = True
            else:
                by_time = closed

    by_size = 0
    if config.delete and config.retention_bytes >= 0:
        excess = sum(s.size for s in segments) - config.retention_bytes
        while by_size < closed and excess - segments[by_size].size >= 0:
            excess -= segments[by_size].size
            by_size += 1

    count = max(by_start, by_time, by_size)
    return RetentionDecision(count, roll and count == n)
