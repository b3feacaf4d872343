"""Kafka's default partitioner, bit for bit: murmur2 known values and sticky null keys."""

from __future__ import annotations

import random

import pytest

from strom.client.partitioner import DefaultPartitioner, murmur2, to_positive

# From Kafka's UtilsTest.testMurmur2 (signed 32-bit results).
KAFKA_VALUES = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), sorted(KAFKA_VALUES.items()))
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_keyed_partition_is_to_positive_mod() -> None:
    p = DefaultPartitioner()
    for key, h in KAFKA_VALUES.items():
        for n in (1, 3, 7, 12):
            assert p.partition_for_key(key, n) == to_positive(h) % n
            assert p.partition_for_key(key, n) == to_positive(h) % n  # cached path


def test_to_positive_is_not_abs() -> None:
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 0x7FFFFFFF


def test_empty_key_hashes() -> None:
    assert isinstance(murmur2(b""), int)
    assert -(2**31) <= murmur2(b"") < 2**31


def test_sticky_partition_stays_until_new_batch() -> None:
    p = DefaultPartitioner(random.Random(1))
    first = p.sticky_partition("t", 6)
    assert all(p.sticky_partition("t", 6) == first for _ in range(100))
    nxt = p.on_new_batch("t", 6, first)
    assert nxt != first
    assert p.sticky_partition("t", 6) == nxt


def test_sticky_single_partition() -> None:
    p = DefaultPartitioner()
    assert p.sticky_partition("t", 1) == 0
    assert p.on_new_batch("t", 1, 0) == 0


def test_sticky_spreads_over_all_partitions() -> None:
    p = DefaultPartitioner(random.Random(7))
    seen = set()
    current = p.sticky_partition("t", 4)
    for _ in range(200):
        current = p.on_new_batch("t", 4, current)
        seen.add(current)
    assert seen == {0, 1, 2, 3}
