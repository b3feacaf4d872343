"""Consumer offset bookkeeping: seeks, resets, prefetch generations, position advance."""

from __future__ import annotations

import pytest

from strom.client.models import OFFSET_BEGINNING, OFFSET_END, TopicPartition
from strom.client.positions import EARLIEST, LATEST, SubscriptionState
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.records import encode_batch

TP = TopicPartition("t", 0)


def _batch_at(base: int, n: int) -> bytes:
    from strom.protocol.batch import patch_offsets

    buf = bytearray(encode_batch([(None, b"v")] * n, timestamp_ms=1))
    patch_offsets(buf, 0, base, 0)
    return bytes(buf)


def test_new_assignment_needs_reset_by_policy() -> None:
    subs = SubscriptionState("earliest")
    subs.assign([TP])
    assert subs.needing_reset() == [(TP, EARLIEST, 0)]
    assert subs.fetchable(0) == []
    subs.set_reset_result(TP, 0, 5)
    assert subs.states[TP].position == 5
    assert [(tp, off) for tp, off, _ in subs.fetchable(0)] == [(TP, 5)]


def test_seek_sentinels_and_explicit() -> None:
    subs = SubscriptionState("latest")
    subs.assign([TP])
    subs.seek(TP, OFFSET_BEGINNING)
    assert subs.states[TP].reset == EARLIEST
    subs.seek(TP, OFFSET_END)
    assert subs.states[TP].reset == LATEST
    subs.seek(TP, 42)
    assert subs.states[TP].position == 42 and subs.states[TP].reset is None
    with pytest.raises(StromError):
        subs.seek(TP, -7)
    with pytest.raises(StromError):
        subs.seek(TopicPartition("other", 0), 1)


def test_prefetch_advances_fetch_offset_not_position() -> None:
    subs = SubscriptionState("earliest", max_buffered_fetches=2)
    subs.assign([TP])
    subs.seek(TP, 0)
    gen = subs.states[TP].generation
    assert subs.on_fetched(TP, gen, _batch_at(0, 10), 20, 0)
    st = subs.states[TP]
    assert (st.position, st.fetch_offset, st.buffered) == (0, 10, 1)
    assert subs.on_fetched(TP, gen, _batch_at(10, 10), 20, 0)
    assert subs.fetchable(0) == []  # buffer full: no third fetch
    c = subs.next_completed()
    assert c is not None and (c.fetch_offset, c.next_offset) == (0, 10)


def test_stale_generation_dropped_after_seek() -> None:
    subs = SubscriptionState("earliest")
    subs.assign([TP])
    subs.seek(TP, 0)
    gen = subs.states[TP].generation
    subs.on_fetched(TP, gen, _batch_at(0, 10), 10, 0)
    subs.seek(TP, 3)
    assert subs.next_completed() is None
    assert not subs.on_fetched(TP, gen, _batch_at(0, 10), 10, 0)  # in-flight answer: stale
    assert subs.states[TP].fetch_offset == 3


def test_advance_moves_position() -> None:
    subs = SubscriptionState("earliest")
    subs.assign([TP])
    subs.seek(TP, 2)
    subs.on_fetched(TP, subs.states[TP].generation, _batch_at(0, 10), 10, 0)
    c = subs.next_completed()
    assert c is not None and c.fetch_offset == 2
    assert subs.advance(c, None, exhausted=True)
    assert subs.states[TP].position == 10 and subs.next_completed() is None


def test_reset_none_reports_error() -> None:
    subs = SubscriptionState("none")
    subs.assign([TP])
    assert subs.needing_reset() == []
    subs.seek(TP, 5)
    subs.request_reset(TP)
    assert subs.errors and subs.errors[0].code is ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_fetch_answer_is_queued_without_a_header_parsed_per_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Queuing an answer needs only the offset after its last whole batch: a few integers
    per batch instead of a full header (~3x cheaper over the 10-30 record batches of a keyed
    produce spread over 1,000 partitions, docs/decisions.md)."""
    from strom.protocol import batch as batch_module

    calls: list[int] = []
    real = batch_module.parse_header
    monkeypatch.setattr(batch_module, "parse_header",
                        lambda buf, position=0: calls.append(position) or real(buf, position))
    subs = SubscriptionState("earliest")
    subs.assign([TP])
    subs.seek(TP, 0)
    data = b"".join(_batch_at(base, 2) for base in range(0, 40, 2))
    assert subs.on_fetched(TP, subs.states[TP].generation, data, 40, 0)
    assert subs.states[TP].fetch_offset == 40
    assert calls == []


def test_a_seek_during_a_reset_asks_again_and_drops_only_its_partitions() -> None:
    other = TopicPartition("t", 1)
    subs = SubscriptionState("latest")
    subs.assign([TP, other])
    for tp, _, _ in subs.needing_reset():
        subs.states[tp].resetting = True  # the fetcher sent their ListOffsets
    assert subs.needing_reset() == []
    subs.seek_many([TP], OFFSET_BEGINNING)
    assert [(tp, how) for tp, how, _ in subs.needing_reset()] == [(TP, EARLIEST)]
    subs.seek_many([TP, other], 7)
    assert subs.needing_reset() == []
    assert subs.on_fetched(TP, subs.states[TP].generation, _batch_at(7, 3), 10, 0)
    assert subs.on_fetched(other, subs.states[other].generation, _batch_at(7, 3), 10, 0)
    subs.seek_many([other], 8)
    assert [c.tp for c in subs.completed] == [TP]
    with pytest.raises(StromError):  # an unassigned partition: none of them moves
        subs.seek_many([TP, TopicPartition("t", 9)], 0)
    assert subs.states[TP].fetch_offset == 10
