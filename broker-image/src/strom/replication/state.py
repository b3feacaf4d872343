"""The contract between the broker's metadata publisher and the replica manager.

Why it exists: the replication layer must not import the broker or controller packages (layering
contract), yet it acts on what the metadata log says. The publisher turns each applied metadata
image into one :class:`PartitionView` per hosted partition and calls the manager; the manager asks
for ISR changes through :data:`AlterIsr` and for leader addresses through :data:`BrokerAddress`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition as of the metadata offset the broker has applied."""

    topic: str
    partition: int
    leader: int
    """Broker id of the leader, ``NO_LEADER`` (-1) while offline."""
    leader_epoch: int
    partition_epoch: int
    """Bumped by every change (ISR, replicas, leader); the ISR change check uses it."""
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    offline: tuple[int, ...] = ()
    """Replicas in log directories their brokers reported offline: they may not join the ISR."""


AlterIsr = Callable[[str, int, tuple[int, ...], int], Awaitable[None]]
"""``alter_isr(topic, partition, new_isr, expected_partition_epoch)``: propose an ISR change.

Returns once the change is committed *and* applied on this broker (so the manager has already
received the new ``PartitionView``); raises ``StromError`` when it was rejected (e.g.
INVALID_UPDATE_VERSION: the partition changed meanwhile, INELIGIBLE_REPLICA: a fenced broker)
or the controller could not be reached in time. The caller retries on its next check."""

BrokerAddress = Callable[[int], "str | None"]
"""``host:port`` of a broker's gRPC endpoint from the metadata image (None when unknown)."""
