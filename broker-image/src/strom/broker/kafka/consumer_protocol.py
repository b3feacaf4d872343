"""Kafka's consumer protocol bytes (``ConsumerProtocolSubscription`` / ``...Assignment``) to and
from the coordinator's structured subscriptions and assignments (no I/O).

Why it exists: Kafka's JoinGroup and SyncGroup carry these as opaque bytes, and the coordinator
(shared with the gRPC front, whose messages are structured) compares subscriptions and relays
assignments as topic lists and partition tuples. Decoding here lets a group mix Kafka-protocol
and gRPC members. The layouts come from kio (Kafka's schemas): a 16-bit version, then the
non-flexible struct of that version; a version newer than kio knows is read with the newest, as
Kafka's ``ConsumerProtocol`` does.

What is kept: subscribed topics, owned partitions (KIP-429), subscription user data, assigned
partitions. What is not: the assignment's user data (Kafka Streams' task data), the
subscription's generation (v2) and rack (v3) — re-encoded subscriptions are version 1.
"""

from __future__ import annotations

import io
import struct
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_assignment.v1 import data as assignment_v1
from kio.schema.consumer_protocol_assignment.v2 import data as assignment_v2
from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.consumer_protocol_subscription.v2 import data as subscription_v2
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from strom.groups.membership import Subscription

TopicPartition = tuple[str, int]

_SUBSCRIPTIONS = (subscription_v0, subscription_v1, subscription_v2, subscription_v3)
_ASSIGNMENTS = (assignment_v0, assignment_v1, assignment_v2, assignment_v3)
_VERSION = struct.Struct(">h")


class ConsumerProtocolError(ValueError):
    """Bytes that are not a consumer-protocol message."""


def _version(data: bytes, newest: int) -> int:
    if len(data) < 2:
        raise ConsumerProtocolError(f"{len(data)} bytes are too short for a version")
    version = int(_VERSION.unpack_from(data)[0])
    if version < 0:
        raise ConsumerProtocolError(f"version {version} is negative")
    return min(version, newest)


def _decode(data: bytes, schemas: tuple[Any, ...], entity: str, what: str) -> Any:
    """The ``entity`` of ``data``'s version (read with the newest of ``schemas`` if newer)."""
    version = _version(data, len(schemas) - 1)
    cls = getattr(schemas[version], entity)
    try:
        value, _ = entity_reader(cls)(data, 2)
    except (SerialError, ValueError, TypeError) as exc:
        raise ConsumerProtocolError(f"{what} v{version}: {exc}") from None
    return value


def decode_subscription(data: bytes) -> Subscription:
    sub = _decode(data, _SUBSCRIPTIONS, "ConsumerProtocolSubscription", "subscription")
    owned = tuple((tp.topic, p) for tp in getattr(sub, "owned_partitions", ()) for p in
                  tp.partitions)
    return Subscription(tuple(sub.topics), owned, bytes(sub.user_data or b""))


def encode_subscription(sub: Subscription) -> bytes:
    module = subscription_v1
    value = module.ConsumerProtocolSubscription(
        topics=tuple(sub.topics), user_data=sub.user_data or None,
        owned_partitions=tuple(module.TopicPartition(topic=t, partitions=ps)  # type: ignore[arg-type]
                               for t, ps in _grouped(sub.owned_partitions)))
    return _encode(1, value)


def decode_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    if not data:
        return ()  # Kafka: an empty assignment is no partitions
    value = _decode(data, _ASSIGNMENTS, "ConsumerProtocolAssignment", "assignment")
    return tuple((tp.topic, p) for tp in value.assigned_partitions for p in tp.partitions)


def encode_assignment(partitions: Iterable[TopicPartition]) -> bytes:
    module = assignment_v0
    value = module.ConsumerProtocolAssignment(
        assigned_partitions=tuple(module.TopicPartition(topic=t, partitions=ps)  # type: ignore[arg-type]
                                  for t, ps in _grouped(partitions)), user_data=None)
    return _encode(0, value)


def _grouped(partitions: Iterable[TopicPartition]) -> list[tuple[str, tuple[int, ...]]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in partitions:
        by_topic[topic].append(partition)
    return [(t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items())]


def _encode(version: int, value: Any) -> bytes:
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(version))
    entity_writer(type(value))(buffer, value)
    return buffer.getvalue()
