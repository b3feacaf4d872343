"""The thread scaffold of the failover benchmarks' writers, written once.

Both failover workloads (Strom's own client in ``failover.py``, confluent-kafka against Strom
and Apache Kafka in ``kafka_failover.py``) keep one record flowing every ``interval_s`` while a
broker is killed, and measure how long after the kill a record sent later is acknowledged.
They differ only in the client that sends; the thread, its bounded run, the shared lists and
the "first acknowledgement after t" question are this class.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

MAX_RUN_S = 3600.0
"""A writer stops by itself after this long even if nobody calls ``__exit__`` (bounded loop)."""


@dataclass
class BackgroundWriter:
    """Subclasses implement :meth:`_run` (send until :attr:`stop` is set or ``deadline()``
    passes) and append ``(send time, ack time, ...)`` tuples to :attr:`acks` under
    :attr:`lock`."""

    bootstrap: str
    interval_s: float = 0.01
    acks: list[tuple[Any, ...]] = field(default_factory=list)
    """(send time, ack time, client-specific fields...) of every acknowledged record."""
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None

    def __enter__(self) -> BackgroundWriter:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(200)

    def _run(self) -> None:
        raise NotImplementedError

    @staticmethod
    def deadline() -> float:
        return time.monotonic() + MAX_RUN_S

    def running(self, deadline: float) -> bool:
        return not self.stop.is_set() and time.monotonic() < deadline

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)

    def first_ack_of_record_sent_after(self, t: float) -> float | None:
        with self.lock:
            times = [ack[1] for ack in self.acks if ack[0] > t]
        return min(times) if times else None
