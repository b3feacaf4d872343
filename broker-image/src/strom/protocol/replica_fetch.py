"""ReplicaFetch on the wire: the ``strom.v1.Replica`` messages, records framed by hand.

The messages are the ones in ``replica.proto``; only the response's record bytes skip protobuf
(:mod:`strom.protocol.wire`): the leader joins them into the response once, the follower appends
views of the received bytes. Both ends register these codecs with gRPC
(``strom.transport.replica_rpc``) instead of the generated servicer and stub, which would copy
every replicated byte three more times.
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.protocol import wire
from strom.protocol.v1 import replica_pb2

SERVICE = "strom.v1.Replica"
METHOD = f"/{SERVICE}/ReplicaFetch"
_PARTITIONS = 1  # ReplicaFetchResponse.partitions
_RECORDS = 8  # ReplicaFetchPartitionResponse.records

PartitionAnswer = replica_pb2.ReplicaFetchPartitionResponse
Answer = tuple[PartitionAnswer, wire.Buffer]
"""One partition's answer without its records (``records`` unset), beside the records."""
Head = replica_pb2.ReplicaFetchResponse
"""The response's own fields (session id, session error) without its partitions."""
Response = tuple[Head, Sequence[Answer]]
Received = tuple[Head, list[tuple[PartitionAnswer, memoryview]]]


def encode_response(response: Response) -> bytes:
    """The ``ReplicaFetchResponse`` bytes of a head and its partitions' answers."""
    head, answers = response
    return wire.encode(head, _PARTITIONS, answers, _RECORDS)


def decode_response(data: bytes) -> Received:
    """The head, and each partition's answer (without records) beside a view of its records in
    ``data``."""
    return wire.decode(data, replica_pb2.ReplicaFetchResponse, _PARTITIONS,
                       replica_pb2.ReplicaFetchPartitionResponse, _RECORDS)
