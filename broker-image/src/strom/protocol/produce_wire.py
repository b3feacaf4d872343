"""The broker's view of a ``ProduceRequest``: record batches as views of the received bytes.

Parsing with protobuf copies every batch into the message, and reading ``records`` copies it
again (upb makes a new ``bytes`` per access); a leader then copies nothing itself (the append is
one ``pwritev`` of the received buffer). :func:`decode_request` reads the same bytes with
:mod:`strom.protocol.wire` instead: the small fields through protobuf, each partition's records
as a ``memoryview``. The handler works on :class:`ProduceRequestLike`, which the generated
message satisfies too (tests and in-process callers build those).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from strom.protocol import wire
from strom.protocol.v1 import broker_pb2

_PARTITIONS = 3  # ProduceRequest.partitions
_RECORDS = 3  # PartitionProduceData.records


class PartitionDataLike(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def records(self) -> bytes | memoryview: ...


class ProduceRequestLike(Protocol):
    @property
    def acks(self) -> int: ...

    @property
    def timeout_ms(self) -> int: ...

    @property
    def partitions(self) -> Sequence[PartitionDataLike]: ...


class PartitionData(NamedTuple):  # tuples: one of each per produce request, built cheaply
    topic: str
    partition: int
    records: memoryview


class ProduceRequest(NamedTuple):
    acks: int
    timeout_ms: int
    partitions: list[PartitionData]


def decode_request(data: bytes) -> ProduceRequest:
    """``ProduceRequest`` bytes (any protobuf encoding) as a :class:`ProduceRequest`."""
    head, items = wire.decode(data, broker_pb2.ProduceRequest, _PARTITIONS,
                              broker_pb2.PartitionProduceData, _RECORDS)
    return ProduceRequest(head.acks, head.timeout_ms,
                          [PartitionData(p.topic, p.partition, records) for p, records in items])
