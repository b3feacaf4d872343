"""What the replica manager needs from the broker configuration, and nothing else.

The broker builds one :class:`ReplicationSettings` from its ``replica.*`` keys; the replication
package never reads :class:`~strom.broker.config.BrokerConfig` itself (layering: the broker
imports replication, not the other way round), which also lets tests use tiny lag times.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReplicationSettings:
    broker_id: int
    replica_lag_time_max_ms: int = 10_000
    """``replica.lag.time.max.ms``: a follower not caught up for this long leaves the ISR."""
    fetch_wait_max_ms: int = 500
    """``replica.fetch.wait.max.ms``: long-poll time of a follower's ReplicaFetch."""
    fetch_max_bytes: int = 1_048_576
    """``replica.fetch.max.bytes``: per partition and fetch (at least one whole batch)."""
    fetch_response_max_bytes: int = 10_485_760
    """``replica.fetch.response.max.bytes``: per ReplicaFetch response."""
    fetch_backoff_ms: int = 100
    """First delay after a failed fetch (unreachable leader, error); doubles per failure."""
    fetch_backoff_max_ms: int = 1_000
    """Upper bound of that delay, so a recovered leader is found again quickly."""
    fetch_timeout_ms: int = 30_000
    """gRPC deadline of one ReplicaFetch call on top of its long-poll time."""
    isr_check_interval_ms: int | None = None
    """How often the leader looks for lagging followers; None = lag time / 2 (as Kafka)."""
    max_message_bytes: int = 104_857_600
    """gRPC message size limit of the follower's channel (the broker's ``max.message.size``)."""

    @property
    def isr_check_interval_s(self) -> float:
        interval = self.isr_check_interval_ms
        if interval is None:
            interval = max(self.replica_lag_time_max_ms // 2, 1)
        return interval / 1000.0
