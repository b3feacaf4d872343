"""Strom's Python client: ``Producer``, ``Consumer`` and ``Admin``, sync and asyncio.

The public front is this module; everything else in the package is private. Pure logic
(partitioner, accumulator, metadata routing, retry policy, offset bookkeeping) lives in modules of
its own and is tested without sockets; the I/O (gRPC over ``grpc.aio``) is confined to
``connections``, ``sender``, ``fetcher``, ``offsets`` and the front classes. The client imports
only ``strom.protocol`` (an import-linter contract).
"""

from strom.client.admin import Admin
from strom.client.aio_admin import AsyncAdmin
from strom.client.aio_consumer import AsyncConsumer
from strom.client.aio_producer import AsyncProducer
from strom.client.consumer import Consumer
from strom.client.models import (
    OFFSET_BEGINNING,
    OFFSET_END,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    NewTopic,
    PartitionDescription,
    RecordMetadata,
    TopicDescription,
    TopicPartition,
)
from strom.client.partitioner import murmur2
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
    "ConfigEntry",
    "Consumer",
    "ErrorCode",
    "NewTopic",
    "PartitionDescription",
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
