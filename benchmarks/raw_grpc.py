"""The gRPC half of the equal-cost raw clients (section ``kafka-listener``; see
:mod:`benchmarks.raw_records`): one channel to the broker's gRPC port, the generated ``Broker``
stub's Fetch, and Produce of pre-serialized request bytes.

Same work per request as :mod:`benchmarks.raw_kafka`: a Fetch request built by the protocol's
library (protobuf here, kio there) for every partition at its next offset, the answer parsed by
that library, its record bytes counted by :func:`benchmarks.raw_records.count_records`; a
Produce request encoded once (one batch per partition) and sent again and again, one in flight,
acks=1, its answer parsed and checked for errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc

from benchmarks import raw_records as rr
from benchmarks.strom_workloads import Throughput
from strom.protocol.v1 import broker_pb2
from strom.transport.v1 import broker_pb2_grpc

_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
TIMEOUT_S = 60.0


def fetch_request(topic: str, offsets: Mapping[int, int], max_wait_ms: int, max_bytes: int,
                  partition_max_bytes: int) -> broker_pb2.FetchRequest:
    """One consumer Fetch (replica -1) of every partition of ``topic`` from its offset."""
    return broker_pb2.FetchRequest(
        max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes, replica_id=-1,
        partitions=[broker_pb2.FetchPartition(topic=topic, partition=p, fetch_offset=o,
                                              partition_max_bytes=partition_max_bytes,
                                              current_leader_epoch=-1)
                    for p, o in offsets.items()])


def records_of(response: broker_pb2.FetchResponse) -> dict[int, bytes]:
    """Each partition's record bytes; an error raises (the benchmark reads a healthy log)."""
    out: dict[int, bytes] = {}
    for p in response.partitions:
        if p.error_code:
            raise RuntimeError(f"Fetch {p.topic}-{p.partition}: error {p.error_code} "
                               f"{p.error_message}")
        out[p.partition] = p.records
    return out


def produce_request(topic: str, partitions: int, batch: bytes) -> bytes:
    """A serialized acks=1 Produce of ``batch`` to each partition."""
    return broker_pb2.ProduceRequest(acks=1, timeout_ms=30_000, partitions=[
        broker_pb2.PartitionProduceData(topic=topic, partition=p, records=batch)
        for p in range(partitions)]).SerializeToString()


def check_produced(response: broker_pb2.ProduceResponse) -> None:
    for p in response.partitions:
        if p.error_code:
            raise RuntimeError(f"Produce {p.topic}-{p.partition}: error {p.error_code} "
                               f"{p.error_message}")


class RawGrpc:
    """One channel; :meth:`catch_up` and :meth:`produce` time one run each; :meth:`close` it
    (``contextlib.closing``)."""

    def __init__(self, bootstrap: str) -> None:
        self._channel = grpc.insecure_channel(bootstrap, options=_OPTIONS)
        self._stub: Any = broker_pb2_grpc.BrokerStub(self._channel)  # type: ignore[no-untyped-call]
        # Produce of bytes already serialized (no serializer: the request is sent as is).
        self._produce: Any = self._channel.unary_unary(
            "/strom.v1.Broker/Produce", request_serializer=None,
            response_deserializer=broker_pb2.ProduceResponse.FromString)

    def close(self) -> None:
        self._channel.close()


    def catch_up(self, topic: str, partitions: int, records: int, value_size: int, *,
                 max_bytes: int, partition_max_bytes: int, max_wait_ms: int = 500
                 ) -> Throughput:
        fetch = self._stub.Fetch

        def one(offsets: Mapping[int, int]) -> rr.Answer:
            return records_of(fetch(fetch_request(topic, offsets, max_wait_ms, max_bytes,
                                                  partition_max_bytes), timeout=TIMEOUT_S))

        return rr.catch_up(one, partitions, records, value_size)

    def produce(self, topic: str, partitions: int, records: int, value_size: int,
                batch_records: int) -> Throughput:
        request = produce_request(topic, partitions, rr.build_batch(batch_records, value_size))
        call = self._produce

        def send() -> None:
            check_produced(call(request, timeout=TIMEOUT_S))

        return rr.produce_loop(send, rr.requests_for(records, partitions, batch_records),
                               partitions * batch_records, value_size)
