"""Reading a partition back over a broker's gRPC ``Fetch``, for tests that check what a real
broker stored (every acknowledged record, nothing more).

One loop for every such test: fetch from offset 0 with ``min_bytes=0`` until a fetch returns no
record, failing on any partition error.
"""

from __future__ import annotations

from typing import Any

from strom.protocol.records import Record, decode_batches
from strom.protocol.v1 import broker_pb2

__all__ = ["fetch_all"]


def fetch_all(stub: Any, topic: str, partition: int = 0, timeout: float = 10.0) -> list[Record]:
    """Every record of ``topic``/``partition``, in offset order, read with ``stub`` (a
    ``BrokerStub``); AssertionError with the broker's message if a fetch answers an error."""
    out: list[Record] = []
    offset = 0
    while True:
        response = stub.Fetch(broker_pb2.FetchRequest(min_bytes=0, partitions=[
            broker_pb2.FetchPartition(topic=topic, partition=partition, fetch_offset=offset)]),
            timeout=timeout)
        part = response.partitions[0]
        if part.error_code != 0:
            raise AssertionError(part.error_message)
        records = list(decode_batches(part.records, start_offset=offset))
        if not records:
            return out
        out += records
        offset = records[-1].offset + 1
