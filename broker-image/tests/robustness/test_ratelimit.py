"""The rate-limited log: one line per kind and interval, with a count of what was suppressed."""

from __future__ import annotations

import logging

import pytest

from strom.ratelimit import RateLimitedLog, RateLimiter


def test_first_occurrence_passes_then_suppressed_until_interval() -> None:
    limiter = RateLimiter(interval_s=10.0)
    assert limiter.admit("a", 0.0) == 0
    assert limiter.admit("a", 1.0) is None
    assert limiter.admit("a", 9.9) is None
    assert limiter.admit("b", 5.0) == 0  # keys are independent
    assert limiter.admit("a", 10.0) == 2  # two suppressed since the last line
    assert limiter.admit("a", 11.0) is None


def test_keys_are_bounded() -> None:
    limiter = RateLimiter(interval_s=10.0, max_keys=3)
    for i in range(100):
        limiter.admit(f"k{i}", 0.0)
    assert len(limiter._windows) == 3


def test_negative_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        RateLimiter(interval_s=-1)


def test_log_lines_say_how_many_were_suppressed(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    rl = RateLimitedLog(logging.getLogger("test.ratelimit"), 10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.ratelimit"):
        for _ in range(1000):
            rl.warning("bad", "bad request from %s", "peer")
        now[0] = 10.5
        rl.warning("bad", "bad request from %s", "peer")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["bad request from peer",
                     "bad request from peer (999 similar suppressed in the last 10s)"]
