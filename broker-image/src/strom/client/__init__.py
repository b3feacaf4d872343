"""Strom's Python client: ``Producer``, ``Consumer`` and ``Admin``, sync and asyncio.

The public front is this module; everything else in the package is private. Pure logic
(partitioner, accumulator, metadata routing, retry policy, offset bookkeeping) lives in modules of
its own and is tested without sockets; the I/O (gRPC over ``grpc.aio``) is confined to
``connections``, ``sender``, ``fetcher``, ``offsets``, ``group_member`` and the front classes.
The client imports only ``strom.protocol`` and ``strom.model`` (import-linter contracts); the
group leader's assignors (``assignors``) are the client's own, as in Kafka.
"""

from strom.client.admin import Admin
from strom.client.aio_admin import AsyncAdmin
from strom.client.aio_consumer import AsyncConsumer
from strom.client.aio_producer import AsyncProducer
from strom.client.commits import CommitFailedError
from strom.client.consumer import Consumer
from strom.client.group_member import ConsumerRebalanceListener
from strom.client.models import (
    OFFSET_BEGINNING,
    OFFSET_END,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    GroupMemberDescription,
    GroupPartitionLag,
    NewTopic,
    OffsetReset,
    PartitionDescription,
    PartitionReassignment,
    RecordMetadata,
    TopicDescription,
    TopicPartition,
)
from strom.client.partitioner import murmur2
from strom.client.positions import NoOffsetForPartitionError
from strom.client.producer import Producer
from strom.client.producer_batch import RecordFuture
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import Record, TimestampType

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "BrokerDescription",
    "ClusterDescription",
    "CommitFailedError",
    "ConfigEntry",
    "Consumer",
    "ConsumerRebalanceListener",
    "ErrorCode",
    "GroupDescription",
    "GroupListing",
    "GroupMemberDescription",
    "GroupPartitionLag",
    "NewTopic",
    "NoOffsetForPartitionError",
    "OffsetReset",
    "PartitionDescription",
    "PartitionReassignment",
    "Producer",
    "Record",
    "RecordFuture",
    "RecordMetadata",
    "StromError",
    "TimestampType",
    "TopicDescription",
    "TopicPartition",
    "murmur2",
]
