"""Shared fixtures for storage tests: an injectable clock and a log factory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from strom.protocol.records import encode_batch
from strom.storage import LogConfig, PartitionLog


class Clock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


OpenLog = Callable[..., PartitionLog]


@pytest.fixture
def open_log(tmp_path: Path, clock: Clock) -> OpenLog:
    def _open(config: LogConfig | None = None, name: str = "topic-a-0") -> PartitionLog:
        return PartitionLog.open(tmp_path / name, config or LogConfig(), topic="topic-a",
                                 partition=0, clock=clock)

    return _open


def batch(n: int = 3, *, key: bytes | None = b"k", value: bytes | None = b"v" * 20,
          ts: int | None = 1_700_000_000_000, start: int = 0) -> bytes:
    """A producer batch of ``n`` records with distinct values."""
    return encode_batch(
        [(key, None if value is None else value + str(start + i).encode()) for i in range(n)],
        timestamp_ms=ts)


@pytest.fixture
def make_batch() -> Callable[..., bytes]:
    return batch
