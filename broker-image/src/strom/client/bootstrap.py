"""Giving up on a bootstrap list that refuses every connection, after a short bounded backoff.

A client that has never reached the cluster and finds every bootstrap address refusing the
connection (nothing listens there) or unresolvable is misconfigured or early, not in a failover:
waiting out the whole request timeout (30 s, or ``max_block_ms``) only hides the one useful fact.
Kafka's clients reconnect after ``reconnect.backoff.ms`` (50 ms) doubling to
``reconnect.backoff.max.ms`` (1 s); we do the same for about a second (gRPC's own reconnect
backoff is set to those values in ``connections.CHANNEL_OPTIONS``) and then raise
:class:`BootstrapUnreachable`, one line naming every address and what it answered.

Only *connect* failures count: a broker that accepted the connection and then timed out, or
answered with an error, is reachable, and the caller's usual retries apply. Once any broker has
answered, refusals are a failover (a broker restarting) and never end a call early. Pure state;
the callers (``Connections``, ``AsyncAdmin``) do the I/O.
"""

from __future__ import annotations

import grpc

from strom.protocol.errors import ErrorCode, StromError

#: How long every bootstrap address must keep refusing before the client gives up (Kafka:
#: reconnect.backoff.ms=50 doubling to reconnect.backoff.max.ms=1000; a few reconnects).
GIVE_UP_AFTER_MS = 1000.0

_CONNECT_FAILURES = ("failed to connect to all addresses", "dns resolution failed",
                     "errors resolving", "connection refused")


class BootstrapUnreachable(StromError):
    """Every bootstrap address refused the connection; not retriable (fix the address)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.NETWORK_EXCEPTION, message)

    @property
    def retriable(self) -> bool:
        return False


def is_connect_failure(exc: grpc.RpcError) -> bool:
    """True if the call failed before reaching a broker: refused, unresolvable, no route."""
    code = exc.code() if hasattr(exc, "code") else None
    if code != grpc.StatusCode.UNAVAILABLE:
        return False
    details = (exc.details() if hasattr(exc, "details") else str(exc)) or ""
    lowered = details.lower()
    return any(marker in lowered for marker in _CONNECT_FAILURES)


def _reason(details: str) -> str:
    """The last, most specific part of gRPC's connect error ("Connection refused")."""
    tail = details.rsplit(":", 1)[-1].strip()
    return tail or details


class BootstrapTracker:
    """Which bootstrap addresses refused since when; says when to give up."""

    def __init__(self, addresses: list[str], give_up_after_ms: float = GIVE_UP_AFTER_MS) -> None:
        self.addresses = list(dict.fromkeys(addresses))
        self.give_up_after_ms = give_up_after_ms
        self.connected = False
        self._refused: dict[str, str] = {}
        self._first_ms: float | None = None

    def succeeded(self) -> None:
        """Some broker answered: from now on refusals are a failover, not a bad address."""
        self.connected = True
        self._refused.clear()
        self._first_ms = None

    def failed(self, address: str, exc: grpc.RpcError, now_ms: float) -> None:
        """A call to ``address`` failed; remember it if it was a connect failure."""
        if self.connected or address not in self.addresses:
            return
        if not is_connect_failure(exc):
            self._refused.pop(address, None)  # it answered something: reachable
            return
        details = (exc.details() if hasattr(exc, "details") else str(exc)) or ""
        self._refused[address] = _reason(details)
        if self._first_ms is None:
            self._first_ms = now_ms

    def give_up(self, now_ms: float) -> BootstrapUnreachable | None:
        """The error to raise if every address has refused for long enough, else None."""
        if self.connected or self._first_ms is None:
            return None
        if any(a not in self._refused for a in self.addresses):
            return None
        waited = now_ms - self._first_ms
        if waited < self.give_up_after_ms:
            return None
        each = "; ".join(f"{a}: {self._refused[a]}" for a in self.addresses)
        return BootstrapUnreachable(
            f"cannot connect to any bootstrap server ({each}), retried for "
            f"{waited / 1000:.1f} s")
