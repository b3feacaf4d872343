"""The Kafka half of the equal-cost raw clients (section ``kafka-listener``; see
:mod:`benchmarks.raw_records`): one socket to the broker's Kafka listener, requests and answers
encoded and read by kio at the newest versions the listener serves (Fetch v17, Produce v13:
topics by id, so one Metadata call first), sequential, one in flight.

Same work per request as :mod:`benchmarks.raw_grpc`: a Fetch request built by the protocol's
library for every partition at its next offset (a sessionless full fetch: session id 0, epoch
-1), the answer read by that library, its record bytes counted by
:func:`benchmarks.raw_records.count_records`; a Produce request encoded once and sent again and
again with only its correlation id rewritten, acks=1, its answer read and checked.
"""

from __future__ import annotations

import datetime
import socket
import struct
import uuid
from collections.abc import Mapping
from typing import Any

from kio.schema.fetch.v17 import request as fetch_req
from kio.schema.fetch.v17 import response as fetch_resp
from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp
from kio.schema.produce.v13 import request as produce_req
from kio.schema.produce.v13 import response as produce_resp
from kio.serial import entity_reader

from benchmarks import raw_records as rr
from benchmarks.strom_workloads import Throughput
from strom.testing import kafka_wire

FETCH, PRODUCE, METADATA = 1, 0, 3
FETCH_VERSION, PRODUCE_VERSION, METADATA_VERSION = 17, 13, 12
_SIZE = struct.Struct(">i")
#: Where the correlation id sits in a size-prefixed request frame: size, api key, version.
CORRELATION_AT = 8
#: A flexible response header: correlation id and an empty tagged-field section.
RESPONSE_HEADER_BYTES = 5
TIMEOUT_S = 60.0

_read_fetch = entity_reader(fetch_resp.FetchResponse)
_read_produce = entity_reader(produce_resp.ProduceResponse)


def frame(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """A size-prefixed request: header v2 (client id ``raw-bench``) and ``body``, by kio."""
    return kafka_wire.frame(api_key, version, correlation_id, body, client_id="raw-bench")


def with_correlation_id(request: bytes, correlation_id: int) -> bytes:
    """``request`` (a frame of :func:`frame`) with another correlation id."""
    head, rest = split_at_correlation_id(request)
    _SIZE.pack_into(head, CORRELATION_AT, correlation_id)
    return bytes(head) + rest


def split_at_correlation_id(request: bytes) -> tuple[bytearray, memoryview]:
    """A frame as its head up to and including the correlation id (to rewrite) and a view
    of the rest (sent as it is: no copy of the records per request)."""
    end = CORRELATION_AT + _SIZE.size
    return bytearray(request[:end]), memoryview(request)[end:]


def fetch_body(topic_id: uuid.UUID, offsets: Mapping[int, int], max_wait_ms: int,
               max_bytes: int, partition_max_bytes: int) -> fetch_req.FetchRequest:
    return fetch_req.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),  # type: ignore[arg-type]
        min_bytes=1, max_bytes=max_bytes, session_id=0, session_epoch=-1,  # type: ignore[arg-type]
        topics=(fetch_req.FetchTopic(topic_id=topic_id, partitions=tuple(
            fetch_req.FetchPartition(partition=p, fetch_offset=o,  # type: ignore[arg-type]
                                     partition_max_bytes=partition_max_bytes)  # type: ignore[arg-type]
            for p, o in offsets.items())),),
        forgotten_topics_data=())


def records_of(answer: bytes | memoryview) -> dict[int, bytes]:
    """Each partition's record bytes from a Fetch v17 answer frame (header included); an
    error raises."""
    response, _ = _read_fetch(answer, RESPONSE_HEADER_BYTES)
    if response.error_code:
        raise RuntimeError(f"Fetch: error {response.error_code!r}")
    out: dict[int, bytes] = {}
    for topic in response.responses:
        for p in topic.partitions:
            if p.error_code:
                raise RuntimeError(f"Fetch partition {p.partition_index}: {p.error_code!r}")
            out[p.partition_index] = p.records or b""
    return out


def produce_frame(topic_id: uuid.UUID, partitions: int, batch: bytes) -> bytes:
    """An acks=1 Produce v13 of ``batch`` to each partition (correlation id 0)."""
    body = produce_req.ProduceRequest(
        transactional_id=None, acks=1,  # type: ignore[arg-type]
        timeout=datetime.timedelta(seconds=30),  # type: ignore[arg-type]
        topic_data=(produce_req.TopicProduceData(topic_id=topic_id, partition_data=tuple(
            produce_req.PartitionProduceData(index=p, records=batch)  # type: ignore[arg-type]
            for p in range(partitions))),))
    return frame(PRODUCE, PRODUCE_VERSION, 0, body)


def check_produced(answer: bytes | memoryview) -> None:
    response, _ = _read_produce(answer, RESPONSE_HEADER_BYTES)
    for topic in response.responses:
        for p in topic.partition_responses:
            if p.error_code:
                raise RuntimeError(f"Produce partition {p.index}: {p.error_code!r} "
                                   f"{p.error_message}")


class RawKafka:
    """One connection to a Kafka listener; :meth:`catch_up` and :meth:`produce` time one run
    each; :meth:`close` it (``contextlib.closing``)."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self._socket = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0

    def close(self) -> None:
        self._socket.close()


    def _next_id(self) -> int:
        self._correlation += 1
        return self._correlation

    def call(self, request: bytes | bytearray, *more: bytes | bytearray | memoryview
             ) -> memoryview:
        """Send one frame (``request`` and ``more`` parts of it, written together), return the
        answer's frame (header included): one in flight."""
        if more:
            self._send_parts([memoryview(request), *(memoryview(m) for m in more)])
        else:
            self._socket.sendall(request)
        size = _SIZE.unpack(self._exactly(4))[0]
        return self._exactly(size)

    def _send_parts(self, parts: list[memoryview]) -> None:
        while parts:
            sent = self._socket.sendmsg(parts)
            while parts and sent >= len(parts[0]):
                sent -= len(parts[0])
                parts.pop(0)
            if parts and sent:
                parts[0] = parts[0][sent:]

    def _exactly(self, n: int) -> memoryview:
        buffer = bytearray(n)
        view = memoryview(buffer)
        got = 0
        while got < n:
            k = self._socket.recv_into(view[got:], n - got)
            if not k:
                raise ConnectionError(f"listener closed after {got} of {n} bytes")
            got += k
        return view.toreadonly()  # kio reads only read-only buffers; no copy

    def topic_id(self, topic: str) -> uuid.UUID:
        request = md_req.MetadataRequest(
            topics=(md_req.MetadataRequestTopic(topic_id=None, name=topic),),  # type: ignore[arg-type]
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        answer = self.call(frame(METADATA, METADATA_VERSION, self._next_id(), request))
        response, _ = entity_reader(md_resp.MetadataResponse)(answer, RESPONSE_HEADER_BYTES)
        [found] = response.topics
        if found.error_code or found.topic_id is None:
            raise RuntimeError(f"Metadata {topic}: {found.error_code!r}")
        return found.topic_id

    def catch_up(self, topic: str, partitions: int, records: int, value_size: int, *,
                 max_bytes: int, partition_max_bytes: int, max_wait_ms: int = 500
                 ) -> Throughput:
        topic_id = self.topic_id(topic)

        def one(offsets: Mapping[int, int]) -> rr.Answer:
            body = fetch_body(topic_id, offsets, max_wait_ms, max_bytes, partition_max_bytes)
            return records_of(self.call(frame(FETCH, FETCH_VERSION, self._next_id(), body)))

        return rr.catch_up(one, partitions, records, value_size)

    def produce(self, topic: str, partitions: int, records: int, value_size: int,
                batch_records: int) -> Throughput:
        head, rest = split_at_correlation_id(produce_frame(
            self.topic_id(topic), partitions, rr.build_batch(batch_records, value_size)))

        def send() -> None:
            _SIZE.pack_into(head, CORRELATION_AT, self._next_id())
            check_produced(self.call(head, rest))

        return rr.produce_loop(send, rr.requests_for(records, partitions, batch_records),
                               partitions * batch_records, value_size)
