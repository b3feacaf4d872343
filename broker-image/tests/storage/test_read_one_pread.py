"""A read from the batch the offset index points at is one pread (the header is taken from
the data read), and reads equal the header-by-header path at every offset and size (issue 21:
a catch-up Fetch over 1,000 partitions read ~177 partitions with two preads each)."""

from __future__ import annotations

import os

import pytest

from strom.storage import LogConfig, PartitionLog
from strom.storage.log import _whole_batches


def reference(log: PartitionLog, offset: int, max_bytes: int, limit: int) -> bytes:
    """What the read returned before: the header found batch by batch, then the data."""
    found = log._locate(offset) if offset < limit else None
    if found is None or found[1].base_offset >= limit:
        return b""
    seg, h = found
    return _whole_batches(seg.read_at(h.position, max(max_bytes, h.size)), h.size, limit)


@pytest.mark.parametrize("interval", [0, 4096])
def test_reads_equal_the_header_by_header_path(open_log, make_batch, interval: int) -> None:
    log = open_log(LogConfig(segment_bytes=3000, index_interval_bytes=interval))
    for i in range(40):
        log.append_as_leader(make_batch(1 + i % 7, value=b"v" * (10 + 13 * (i % 5))), 0)
    assert log.segment_count > 3
    end = log.log_end_offset
    for offset in range(end):
        for max_bytes in (1, 60, 200, 1000, 1 << 20):
            for limit in (end, max(offset, 1), offset + 3):
                got = log.read(offset, max_bytes, max_offset=limit).records
                assert got == reference(log, offset, max_bytes, min(limit, end)), (
                    offset, max_bytes, limit)


def test_a_read_from_the_log_start_is_one_pread(open_log, make_batch,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log()
    for _ in range(8):
        log.append_as_leader(make_batch(26), 0)
    preads: list[int] = []
    real = os.pread

    def counting(fd: int, n: int, position: int) -> bytes:
        preads.append(n)
        return real(fd, n, position)

    monkeypatch.setattr(os, "pread", counting)
    whole = log.read(0, 1 << 20).records
    assert len(preads) == 1  # before: a header, then the data
    preads.clear()
    assert len(log.read(0, 10).records) < len(whole)  # one whole batch (KIP-74)
    assert len(preads) == 2  # the first 61 bytes said how big it is: read it whole
    preads.clear()
    assert log.read(30, 1 << 20).records  # inside a batch: found header by header
    assert len(preads) >= 2


def test_an_index_entry_not_at_a_batch_of_that_offset_is_not_trusted(
        open_log, make_batch) -> None:
    log = open_log(LogConfig(index_interval_bytes=1 << 20))
    for _ in range(3):
        log.append_as_leader(make_batch(5), 0)
    seg = log._segments[0]
    assert seg.read_indexed(5, 1 << 20) is None  # no entry for 5: not asked to guess
    seg.index.lookup = lambda rel: (rel, 0)  # an index that claims every offset starts at 0
    assert seg.read_indexed(5, 1 << 20) is None  # the batch there starts at 0, not 5
    assert [o for o in _offsets(log.read(5, 1 << 20).records)] == list(range(5, 15))


def _offsets(data: bytes) -> list[int]:
    from strom.protocol.records import decode_batches

    return [r.offset for r in decode_batches(data)]
