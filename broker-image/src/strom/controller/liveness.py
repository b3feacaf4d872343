"""Is anything listening at a broker's address? A refused connection fences it at once.

The session timeout (``broker.session.timeout.ms``, 3 s) has to cover a live broker's worst
stall on a loaded machine, so it cannot be short. But a broker whose *process is gone* (kill -9,
OOM kill, a crash) leaves a port that the kernel answers with a reset: that is proof, not a
guess, and it comes within a round trip. So the active controller, once a broker's heartbeat is
late by ``probe_after`` (two heartbeat intervals), opens a TCP connection to the broker's
registered endpoint; *refused* fences it there and then. Anything else (connected, timed out, no
route, a name that does not resolve) proves nothing and leaves the decision to the session
timeout, so a slow, hung or partitioned broker is judged exactly as before and this adds no false
fencing. Apache Kafka has no such probe (its brokers are fenced by session timeout alone,
9 s by default); recorded in docs/decisions.md.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["PROBE_TIMEOUT_S", "connection_refused"]

PROBE_TIMEOUT_S = 0.5


async def connection_refused(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True only if the kernel at ``host:port`` refused the connection (nothing listens)."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return False
