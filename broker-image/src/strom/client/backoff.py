"""Retry timing: exponential backoff with jitter, bounded by a delivery deadline.

Kafka's clients back off ``retry.backoff.ms * 2^attempts`` up to ``retry.backoff.max.ms`` with
±20% jitter (KIP-580) so that many clients retrying after the same leader change do not stampede
the new leader. Pure functions of their inputs (a random source is injected) so they are tested
without clocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

JITTER = 0.2


@dataclass(slots=True)
class RetryPolicy:
    """When to retry a failed request, and after how long."""

    backoff_ms: int = 100
    backoff_max_ms: int = 1000
    retries: int = 2147483647
    rng: random.Random = field(default_factory=random.Random)

    def backoff(self, attempts: int) -> float:
        """Milliseconds to wait before attempt number ``attempts + 1`` (``attempts`` >= 1)."""
        if self.backoff_ms <= 0:
            return 0.0
        exp = max(0, attempts - 1)
        base = min(float(self.backoff_max_ms), self.backoff_ms * (2.0 ** min(exp, 32)))
        jitter = self.rng.uniform(1.0 - JITTER, 1.0 + JITTER)
        return min(base * jitter, self.backoff_max_ms * (1.0 + JITTER))

    def should_retry(self, retriable: bool, attempts: int, now_ms: float,
                     deadline_ms: float) -> bool:
        """Retry only retriable errors, while attempts remain and the deadline is not reached."""
        return retriable and attempts <= self.retries and now_ms < deadline_ms
