"""Validation of client settings, done once at construction with messages that name the fix.

Kafka clients fail fast on a bad setting; so do we, before any connection is opened, so a typo in
``acks`` or a bootstrap address is reported at the line that made it rather than as a timeout.
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.protocol.errors import ErrorCode, StromError


class InvalidOption(StromError, ValueError):
    """A client option (or a combination of options) that cannot work; INVALID_CONFIG."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_CONFIG, message)


def _bad(message: str) -> StromError:
    return InvalidOption(message)


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


def resolve_idempotence(acks: int | str | None, enable_idempotence: bool | None,
                        retries: int = 1) -> tuple[int, bool]:
    """(acks, idempotence) with Kafka 3's defaults: acks=all and idempotence on.

    Idempotence needs acks=all (a batch only the leader has can be lost in a failover, and its
    retry would then not be recognised) and retries. Left unset, it follows them: an explicit
    acks=0 or 1, or retries=0, turns it off; asked for explicitly with those it is a
    configuration error (Kafka's rules).
    """
    parsed = -1 if acks is None else parse_acks(acks)
    if enable_idempotence is None:
        return parsed, parsed == -1 and retries > 0
    if enable_idempotence and parsed != -1:
        raise _bad(f"enable_idempotence=True needs acks='all' but acks={acks!r}; set acks='all' "
                   f"or enable_idempotence=False")
    if enable_idempotence and retries <= 0:
        raise _bad(f"enable_idempotence=True needs retries > 0 but retries={retries}; allow "
                   f"retries or set enable_idempotence=False")
    return parsed, enable_idempotence


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


#: Assignors the consumer knows, by the protocol name Kafka clients use in JoinGroup.
KNOWN_ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")
#: Assignors that follow the cooperative (incremental, KIP-429) rebalance protocol.
COOPERATIVE_ASSIGNORS = frozenset({"cooperative-sticky"})
_ASSIGNOR_ALIASES = {
    "rangeassignor": "range",
    "roundrobinassignor": "roundrobin",
    "stickyassignor": "sticky",
    "cooperativestickyassignor": "cooperative-sticky",
    "cooperative_sticky": "cooperative-sticky",
    "round-robin": "roundrobin",
}


def parse_assignment_strategy(value: str | Sequence[str]) -> tuple[str, ...]:
    """``partition_assignment_strategy``: assignor names, preferred first (Kafka class names ok)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[str] = []
    for raw in items:
        name = str(raw).strip().lower().rsplit(".", 1)[-1]
        if not name:
            continue
        name = _ASSIGNOR_ALIASES.get(name, name)
        if name not in KNOWN_ASSIGNORS:
            raise _bad(f"partition_assignment_strategy: unknown assignor {raw!r}; use one or "
                       f"more of {', '.join(KNOWN_ASSIGNORS)}")
        if name not in out:
            out.append(name)
    if not out:
        raise _bad("partition_assignment_strategy is empty; give at least one assignor, "
                   "e.g. ['range', 'cooperative-sticky']")
    return tuple(out)


def resolve_auto_commit(group_id: str | None, enable_auto_commit: bool | None) -> bool:
    """Kafka's rule: auto-commit defaults to on with a group and off without one; asking for it
    without a group is a configuration error (there is nowhere to commit to)."""
    if enable_auto_commit is None:
        return group_id is not None
    if enable_auto_commit and group_id is None:
        raise _bad("enable_auto_commit=True needs a group_id to commit to; set group_id or "
                   "enable_auto_commit=False")
    return enable_auto_commit


def parse_group_id(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _bad(f"{name}={value!r} must be a non-empty string (or None)")
    return value
