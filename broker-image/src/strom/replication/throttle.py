"""A token bucket for the reassignment replication throttle, pure (callers pass the time).

Kafka throttles the bytes a leader sends to replicas that are catching up during a reassignment
(``leader.replication.throttled.rate``); ISR members are never throttled, so a throttle cannot
slow acks=all. The bucket lets a fetch through while it has any tokens and then charges the whole
response (the balance may go negative), so one large batch is never split or starved: the rate
holds on average and the next fetches wait until the debt is repaid. A burst of one second's
worth of tokens is allowed after idling.

Differs from Kafka: Kafka measures a rate over sampled windows; a bucket per broker and side
(leader: bytes sent to replicas being added; follower: bytes fetched for its own) is simpler and
gives the same average rate.
"""

from __future__ import annotations

UNLIMITED = -1


class TokenBucket:
    def __init__(self, rate_bytes_per_sec: int, now_s: float) -> None:
        self._rate = rate_bytes_per_sec
        self._tokens = float(max(rate_bytes_per_sec, 0))
        self._updated = now_s

    @property
    def rate(self) -> int:
        return self._rate

    @rate.setter
    def rate(self, value: int) -> None:
        if value != self._rate:
            self._rate = value
            self._tokens = min(self._tokens, float(max(value, 0)))

    @property
    def unlimited(self) -> bool:
        return self._rate < 0

    def _refill(self, now_s: float) -> None:
        elapsed = max(now_s - self._updated, 0.0)
        self._updated = max(now_s, self._updated)
        if self._rate >= 0:
            self._tokens = min(self._tokens + elapsed * self._rate, float(self._rate))

    def allows(self, now_s: float) -> bool:
        """Whether bytes may be sent now (the balance is positive, or no limit)."""
        if self.unlimited:
            return True
        self._refill(now_s)
        return self._tokens > 0

    def charge(self, nbytes: int, now_s: float) -> None:
        if self.unlimited:
            return
        self._refill(now_s)
        self._tokens -= nbytes

    def wait_s(self, now_s: float) -> float:
        """Seconds until :meth:`allows` turns true (0 if it is already)."""
        if self.unlimited:
            return 0.0
        self._refill(now_s)
        if self._tokens > 0:
            return 0.0
        if self._rate == 0:
            return float("inf")
        return (-self._tokens + 1) / self._rate
