"""Which partition a record goes to: Kafka's default partitioner, bit for bit.

Keyed records use ``murmur2(key) & 0x7fffffff % partitions`` exactly as Kafka's Java client
(``Utils.murmur2``, seed 0x9747b28c), so a key lands on the same partition whichever client wrote
it. Records without a key use sticky partitioning (KIP-480): they stick to one partition until
the batch being filled there is closed, then move on, which gives big batches at low linger.

Pure logic: no I/O, no clocks; the accumulator tells the partitioner when a batch was closed.
"""

from __future__ import annotations

import random

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit hash of ``data``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    length4 = length & ~3
    for i in range(0, length4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length & 3
    if extra == 3:
        h ^= data[length4 + 2] << 16
    if extra >= 2:
        h ^= data[length4 + 1] << 8
    if extra >= 1:
        h ^= data[length4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not abs, which overflows on MIN)."""
    return value & 0x7FFFFFFF


_CACHE_LIMIT = 65536


class DefaultPartitioner:
    """Kafka's default partitioner: murmur2 for keys, sticky for null keys.

    Hashes of recent keys are cached (keys repeat in most workloads, and pure-Python murmur2
    costs microseconds); the cache is simply cleared when it reaches 65536 keys.
    """

    __slots__ = ("_hash_cache", "_rng", "_sticky")

    def __init__(self, rng: random.Random | None = None) -> None:
        self._hash_cache: dict[bytes, int] = {}
        self._sticky: dict[str, int] = {}
        self._rng = rng or random.Random()

    def partition_for_key(self, key: bytes, num_partitions: int) -> int:
        h = self._hash_cache.get(key)
        if h is None:
            if len(self._hash_cache) >= _CACHE_LIMIT:
                self._hash_cache.clear()
            h = self._hash_cache[key] = murmur2(key) & 0x7FFFFFFF
        return h % num_partitions

    def sticky_partition(self, topic: str, num_partitions: int) -> int:
        """The partition null-key records of ``topic`` currently stick to."""
        p = self._sticky.get(topic)
        if p is None or p >= num_partitions:
            p = self._sticky[topic] = self._rng.randrange(num_partitions)
        return p

    def on_new_batch(self, topic: str, num_partitions: int, previous: int) -> int:
        """The sticky batch of ``previous`` was closed: pick another partition (KIP-480)."""
        if num_partitions <= 1:
            p = 0
        else:
            p = self._rng.randrange(num_partitions - 1)
            if p >= previous:
                p += 1
        self._sticky[topic] = p
        return p
