"""When a poll wakes the fetcher: only for a partition the fetcher may fetch now."""

from __future__ import annotations

from strom.client.consumer_settings import ConsumerSettings
from strom.client.fetcher import ConsumerCore
from strom.client.models import TopicPartition
from strom.protocol.batch import patch_offsets
from strom.protocol.records import encode_batch

IN_FLIGHT, IDLE = TopicPartition("t", 0), TopicPartition("t", 1)


def _batch_at(base: int, n: int) -> bytes:
    buf = bytearray(encode_batch([(None, b"v")] * n, timestamp_ms=1))
    patch_offsets(buf, 0, base, 0)
    return bytes(buf)


def test_a_poll_wakes_the_fetcher_only_for_a_partition_it_may_fetch_now() -> None:
    """Emptying a partition's buffer while a Fetch for it is in flight needs no wake-up: the
    fetcher looks at the partition again when that answer is in. With polls of 500 records
    over 1,000 partitions nearly every poll emptied one, and each wake-up cost a step over
    every partition (a catch-up over 1,000 partitions 1.25M -> 1.50M records/s without them).
    A partition it is not fetching must still wake it, or its next records would wait for an
    unrelated answer (or a long-poll's whole wait)."""
    core = ConsumerCore(ConsumerSettings.build("127.0.0.1:1"), on_data=lambda: None)
    subs = core.subs
    subs.assign([IN_FLIGHT, IDLE])
    for tp in (IN_FLIGHT, IDLE):
        subs.seek(tp, 0)
        assert subs.on_fetched(tp, subs.states[tp].generation, _batch_at(0, 5), 100, 0)
    subs.states[IN_FLIGHT].in_flight = True  # the next Fetch already asks for it

    records, freed = core.take(6)  # empties the partition in flight, starts the idle one
    assert [(r.partition, r.offset) for r in records] == [(0, o) for o in range(5)] + [(1, 0)]
    assert not freed
    assert subs.states[IN_FLIGHT].buffered == 0

    records, freed = core.take(2)  # part of the idle one's buffer: nothing freed yet
    assert [r.offset for r in records] == [1, 2] and not freed
    records, freed = core.take(100)  # ... and the rest: the fetcher may fetch it now
    assert [r.offset for r in records] == [3, 4] and freed
