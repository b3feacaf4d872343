"""Retry policy: exponential backoff with ±20% jitter, capped, and the retry decision."""

from __future__ import annotations

import random

from strom.client.backoff import RetryPolicy


def test_backoff_grows_exponentially_within_jitter() -> None:
    policy = RetryPolicy(backoff_ms=100, backoff_max_ms=10_000, rng=random.Random(3))
    for attempt, base in [(1, 100), (2, 200), (3, 400), (4, 800)]:
        for _ in range(50):
            value = policy.backoff(attempt)
            assert base * 0.8 <= value <= base * 1.2


def test_backoff_is_capped() -> None:
    policy = RetryPolicy(backoff_ms=100, backoff_max_ms=1000, rng=random.Random(3))
    for attempt in (5, 10, 100, 10_000):
        assert policy.backoff(attempt) <= 1200


def test_backoff_has_jitter() -> None:
    policy = RetryPolicy(backoff_ms=100, backoff_max_ms=1000, rng=random.Random(3))
    assert len({round(policy.backoff(2), 3) for _ in range(20)}) > 1


def test_zero_backoff() -> None:
    assert RetryPolicy(backoff_ms=0).backoff(3) == 0.0


def test_should_retry() -> None:
    policy = RetryPolicy(retries=3)
    assert policy.should_retry(True, 1, now_ms=0, deadline_ms=100)
    assert not policy.should_retry(False, 1, now_ms=0, deadline_ms=100)
    assert not policy.should_retry(True, 4, now_ms=0, deadline_ms=100)
    assert not policy.should_retry(True, 1, now_ms=100, deadline_ms=100)
