"""What to do when a long-lived task fails: restart it after a backoff, or stop the process.

Pure: a function of the task's recent failures and the clock, so it is tested without asyncio.
A task is either *restartable* (its loop can begin again from state it re-reads: heartbeats,
replica fetchers, the ISR checker, the group coordinator's housekeeping) or *critical* (its
state cannot be trusted after an unexpected exception: the Raft driver, the active controller,
the metadata publisher that runs inside the Raft driver). A critical task's first failure stops
the process with a non-zero exit, so that it is restarted from what is on disk (Kafka's fatal
fault handler); a restartable task is restarted with an exponential backoff, until it fails
``max_failures`` times within ``window_s`` - then it is treated as critical too, because a task
that cannot stay up leaves a broker that looks healthy and is not.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["Escalate", "Restart", "RestartPolicy", "TaskHistory"]


@dataclass(frozen=True, slots=True)
class Restart:
    delay_s: float


@dataclass(frozen=True, slots=True)
class Escalate:
    reason: str


@dataclass(slots=True)
class TaskHistory:
    """The failure times of one task (oldest first), kept by the caller between decisions."""

    failures: deque[float] = field(default_factory=deque)


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    max_failures: int = 5
    window_s: float = 60.0
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 5.0

    def decide(self, history: TaskHistory, now: float, *, restartable: bool) -> Restart | Escalate:
        """Record a failure at ``now`` and decide."""
        failures = history.failures
        failures.append(now)
        while failures and now - failures[0] > self.window_s:
            failures.popleft()
        if not restartable:
            return Escalate("the task cannot be restarted safely")
        if len(failures) >= self.max_failures:
            return Escalate(f"it failed {len(failures)} times within {self.window_s:.0f}s")
        delay = min(self.max_backoff_s, self.initial_backoff_s * 2 ** (len(failures) - 1))
        return Restart(delay)
