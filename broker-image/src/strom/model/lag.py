"""Consumer lag: how many records a group has yet to consume on a partition. The one definition.

Lag drives the admin ``group describe`` table (``strom group describe``, ``Admin.group_lag``),
the per-group broker metric ``strom_consumer_group_lag`` and the operator's StromConsumerGroup
status and lag-based autoscaling, so all of them compute it here and agree.

Kafka's definition: log end offset minus committed offset, never negative (a commit can be ahead
of a log truncated under it). Where the group has committed nothing, the lag is what a consumer
starting from the earliest offset would still read, log end minus log start: a partition nobody
has committed is not "caught up" (0 would hide a stuck group, and a lag-based autoscaler would
never start a consumer for it). The log end a broker serves to consumers is the high watermark,
so that is what callers pass as ``log_end_offset``. Unknown (None) only where the log end is not
known (negative: the topic is gone, or this broker does not host the partition).
"""

from __future__ import annotations


def partition_lag(log_end_offset: int, committed: int | None, log_start_offset: int = 0
                  ) -> int | None:
    """Records the group has yet to consume; None when the log end is unknown (negative)."""
    if log_end_offset < 0:
        return None
    start = log_start_offset if committed is None else committed
    return max(0, log_end_offset - max(start, 0))
