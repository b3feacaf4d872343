"""Validation of client settings, done once at construction with messages that name the fix.

Kafka clients fail fast on a bad setting; so do we, before any connection is opened, so a typo in
``acks`` or a bootstrap address is reported at the line that made it rather than as a timeout.
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.protocol.errors import ErrorCode, StromError


def _bad(message: str) -> StromError:
    return StromError(ErrorCode.INVALID_CONFIG, message)


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9092"`` or ``["h1:9092", ...]`` -> ``[("h1", 9092), ...]``."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[tuple[str, int]] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise _bad(f"bootstrap_servers entry {item!r} is not HOST:PORT, e.g. 127.0.0.1:9092")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise _bad("bootstrap_servers is empty; pass at least one HOST:PORT")
    return out


def parse_acks(acks: int | str) -> int:
    """Kafka's acks: 0, 1, or -1 / "all"."""
    if isinstance(acks, str):
        text = acks.strip().lower()
        if text == "all":
            return -1
        try:
            acks = int(text)
        except ValueError:
            raise _bad(f"acks={acks!r} is not valid; use 0, 1, -1 or 'all'") from None
    if acks not in (0, 1, -1):
        raise _bad(f"acks={acks!r} is not valid; use 0, 1, -1 or 'all'")
    return acks


def parse_offset_reset(value: str) -> str:
    text = value.strip().lower()
    if text in ("smallest", "beginning"):
        text = "earliest"
    if text in ("largest", "end"):
        text = "latest"
    if text not in ("earliest", "latest", "none"):
        raise _bad(f"auto_offset_reset={value!r} is not valid; use earliest, latest or none")
    return text


def require_positive(name: str, value: int, minimum: int = 1) -> int:
    if value < minimum:
        raise _bad(f"{name}={value} must be >= {minimum}")
    return value
