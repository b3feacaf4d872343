"""Log lines that a client can cause, at a bounded rate: one line per kind per interval.

Why it exists: a broker answers bad requests (malformed protobuf, a failing disk, an unexpected
error in a handler) with an error status; logging a full traceback for each of them let one
hostile client write 45 MB of log for 68k requests. Every such place logs through a
:class:`RateLimitedLog`: the first occurrence of a kind (a key such as ``"malformed Produce"``)
is logged at once, further ones within ``interval_s`` are only counted, and the next line logged
for that kind says how many were suppressed. A traceback is attached at most once per kind and
interval. The policy (:class:`RateLimiter`) is a pure function of the key and the clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DEFAULT_INTERVAL_S", "RateLimitedLog", "RateLimiter"]

DEFAULT_INTERVAL_S = 10.0
_MAX_KEYS = 1024


@dataclass(slots=True)
class _Window:
    logged_at: float
    suppressed: int = 0


class RateLimiter:
    """Decides which occurrences of each key are logged: at most one per ``interval_s``.

    :meth:`admit` answers ``None`` for an occurrence to suppress, else the number suppressed
    since the last admitted one of the same key. Keys are bounded (``max_keys``; the oldest are
    forgotten), so clients that invent keys cannot grow the table.
    """

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, max_keys: int = _MAX_KEYS) -> None:
        if interval_s < 0:
            raise ValueError(f"interval_s must be >= 0, got {interval_s}")
        self.interval_s = interval_s
        self._max_keys = max_keys
        self._windows: dict[str, _Window] = {}

    def admit(self, key: str, now: float) -> int | None:
        window = self._windows.get(key)
        if window is None:
            if len(self._windows) >= self._max_keys:
                del self._windows[next(iter(self._windows))]
            self._windows[key] = _Window(now)
            return 0
        if now - window.logged_at >= self.interval_s:
            suppressed = window.suppressed
            window.logged_at, window.suppressed = now, 0
            return suppressed
        window.suppressed += 1
        return None


class RateLimitedLog:
    """A logger front that passes at most one line per key and interval to ``logger``."""

    def __init__(self, logger: logging.Logger, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.limiter = RateLimiter(interval_s)
        self._clock = clock

    def log(self, level: int, key: str, message: str, *args: object,
            exc_info: bool = False) -> bool:
        """Log ``message % args`` unless ``key`` was logged within the interval; True if logged."""
        suppressed = self.limiter.admit(key, self._clock())
        if suppressed is None:
            return False
        if suppressed:
            message += " (%d similar suppressed in the last %.0fs)"
            args = (*args, suppressed, self.limiter.interval_s)
        self.logger.log(level, message, *args, exc_info=exc_info)
        return True

    def warning(self, key: str, message: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, message, *args)

    def error(self, key: str, message: str, *args: object, exc_info: bool = False) -> bool:
        return self.log(logging.ERROR, key, message, *args, exc_info=exc_info)
