"""Commit markers (pure): encoding, the newest marker of a query, the backward scan windows."""

from __future__ import annotations

import pytest

from strom_spark.markers import (
    HEADER_BATCH,
    HEADER_QUERY,
    HEADER_WRITER,
    CommitMarker,
    already_committed,
    batch_headers,
    latest_marker,
    scan_windows,
)

Q1 = "114b92b9-83c1-499c-86f9-b6c576e9e4a1"
Q2 = "22f8d941-fca2-4399-a4ac-da59d89a5ed8"


def _rec(m: CommitMarker) -> tuple[bytes | None, bytes | None]:
    return m.key(), m.value()


def test_marker_round_trip() -> None:
    m = CommitMarker(Q1, 7, records=120, writers=("0.0.ab12", "1.1.cd34"), committed_at_ms=5)
    assert m.key() == Q1.encode()
    assert CommitMarker.decode(m.key(), m.value()) == m


@pytest.mark.parametrize("key,value", [
    (None, b"{}"),
    (Q1.encode(), None),  # tombstone
    (Q1.encode(), b"not json"),
    (Q1.encode(), b'{"query": "other", "batch": 1}'),  # key and body disagree
    (Q1.encode(), b'{"query": "%s", "batch": "1"}' % Q1.encode()),  # batch not an int
    (Q1.encode(), b"[1, 2]"),
    (b"\xff", b'{"query": "x", "batch": 1}'),
])
def test_decode_rejects_what_is_not_a_marker(key: bytes | None, value: bytes | None) -> None:
    assert CommitMarker.decode(key, value) is None


def test_latest_marker_is_the_last_of_the_query_in_offset_order() -> None:
    records = [
        _rec(CommitMarker(Q1, 0)),
        _rec(CommitMarker(Q2, 10)),
        _rec(CommitMarker(Q1, 1)),
        (Q1.encode(), b"garbage"),
        _rec(CommitMarker(Q2, 11)),
    ]
    found = latest_marker(records, Q1)
    assert found is not None and found.batch == 1
    found2 = latest_marker(records, Q2)
    assert found2 is not None and found2.batch == 11
    assert latest_marker(records, "no-such-query") is None
    assert latest_marker([], Q1) is None


def test_already_committed() -> None:
    assert not already_committed(0, None)
    assert already_committed(3, CommitMarker(Q1, 3))  # the replayed batch itself
    assert already_committed(2, CommitMarker(Q1, 3))
    assert not already_committed(4, CommitMarker(Q1, 3))  # the next batch runs


def test_scan_windows_go_backwards_to_the_log_start() -> None:
    assert list(scan_windows(0, 0)) == []
    assert list(scan_windows(5, 5)) == []
    assert list(scan_windows(0, 10, step=4)) == [(6, 10), (2, 6), (0, 2)]
    assert list(scan_windows(3, 7, step=100)) == [(3, 7)]
    with pytest.raises(ValueError):
        list(scan_windows(0, 10, step=0))


def test_batch_headers() -> None:
    assert batch_headers(Q1, 12, "0.0.ab") == (
        (HEADER_QUERY, Q1.encode()), (HEADER_BATCH, b"12"), (HEADER_WRITER, b"0.0.ab"))
