"""Leader appends write offsets from the headers around the producer's bytes (no copy):
many batches in one request (more iovecs than one pwritev takes), across segment rolls, and the
result is the same file a patched copy would have given, valid after reopening."""

from __future__ import annotations

from collections.abc import Callable

from strom.protocol.batch import iter_headers, patch_offsets, validate_batches
from strom.protocol.records import decode_batches
from strom.storage import LogConfig, PartitionLog


def test_many_batches_one_request_same_bytes_as_patched_copy(
        open_log: Callable[..., PartitionLog], make_batch: Callable[..., bytes]) -> None:
    log = open_log(LogConfig(segment_bytes=64 * 1024, index_interval_bytes=0))
    log.append_as_leader(make_batch(2), leader_epoch=3)
    batches = [make_batch(1 + i % 4, start=i * 10) for i in range(700)]  # 1400 iovecs
    request = b"".join(batches)
    result = log.append_as_leader(request, leader_epoch=3)
    assert (result.base_offset, result.size_bytes) == (2, len(request))
    expected = bytearray(request)
    offset = 2
    for h in iter_headers(request):
        patch_offsets(expected, h.position, offset, 3)
        offset += h.records_count
    assert result.last_offset == offset - 1
    assert log.segment_count > 1
    got = bytearray()
    position = 2
    while position < offset:
        chunk = log.read(position, 1 << 20).records
        headers = validate_batches(chunk)  # CRCs still good
        got += chunk
        position = headers[-1].next_offset
    assert got == expected  # reading from offset 2 starts at the request's first batch
    log.close()
    reopened = open_log(LogConfig(segment_bytes=64 * 1024, index_interval_bytes=0))
    assert reopened.log_end_offset == offset
    records = list(decode_batches(reopened.read(500, 1 << 20).records, start_offset=500))
    assert records[0].offset == 500 and records[0].leader_epoch == 3
