"""Replay a ``__consumer_offsets`` partition: its log, from the start to the log end, as records.

A new coordinator rebuilds its groups and offsets from nothing but this log (Kafka's
``GroupMetadataManager.loadGroupsAndOffsets``). Reading goes chunk by chunk so the caller can
yield to the event loop between chunks: a large partition must not stall other requests.
Records without a key are not ours (nobody else should write here) and are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

from strom.groups.offsets import Record
from strom.protocol.batch import iter_headers
from strom.protocol.records import decode_batches
from strom.storage.log import PartitionLog

CHUNK_BYTES = 1 << 20


def read_chunks(plog: PartitionLog, chunk_bytes: int = CHUNK_BYTES) -> Iterator[list[Record]]:
    """Every keyed record from the log start to the log end offset (as of the call)."""
    position = plog.log_start_offset
    end = plog.log_end_offset
    while position < end:
        data = plog.read(position, chunk_bytes, max_offset=end).records
        if not data:
            break
        next_position = position
        for header in iter_headers(data):
            next_position = max(next_position, header.next_offset)
        chunk = [Record(r.key, r.value)
                 for r in decode_batches(data, plog.topic, plog.partition, position)
                 if r.key is not None]
        yield chunk
        if next_position <= position:
            break
        position = next_position
