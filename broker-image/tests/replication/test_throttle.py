"""The reassignment throttle's token bucket, with explicit times."""

from __future__ import annotations

from strom.replication.throttle import TokenBucket


def test_unlimited_always_allows() -> None:
    bucket = TokenBucket(-1, 0.0)
    bucket.charge(10**9, 0.0)
    assert bucket.allows(0.0) and bucket.wait_s(0.0) == 0.0


def test_debt_blocks_until_repaid_at_the_rate() -> None:
    bucket = TokenBucket(1000, 0.0)        # starts with one second of burst
    assert bucket.allows(0.0)
    bucket.charge(3000, 0.0)               # a big batch goes through whole: balance -2000
    assert not bucket.allows(1.0)          # -1000
    assert not bucket.allows(2.0)          # 0: not positive yet
    assert bucket.allows(2.01)
    assert abs(TokenBucket(1000, 0.0).wait_s(0.0)) == 0.0


def test_wait_time_and_burst_cap() -> None:
    bucket = TokenBucket(500, 0.0)
    bucket.charge(1500, 0.0)               # -1000
    assert 2.0 <= bucket.wait_s(0.0) <= 2.01
    idle = TokenBucket(500, 0.0)
    assert idle.allows(100.0)
    idle.charge(600, 100.0)                # burst capped at 500 after idling: -100
    assert not idle.allows(100.0)


def test_rate_change_applies() -> None:
    bucket = TokenBucket(-1, 0.0)
    bucket.rate = 100
    bucket.charge(200, 0.0)
    assert not bucket.allows(0.5)
    bucket.rate = -1
    assert bucket.allows(0.5)
