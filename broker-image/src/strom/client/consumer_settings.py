"""A consumer's options: the keyword arguments both consumers take and their validated form.

One place for the defaults and the checks (``ConsumerSettings.build``), shared by ``Consumer``,
``AsyncConsumer``, the fetcher and the group membership rules; pure (no I/O), so the sans-I/O
``group_state`` can read the settings it needs without depending on the fetcher.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from strom.client.config import (
    COOPERATIVE_ASSIGNORS,
    InvalidOption,
    parse_assignment_strategy,
    parse_bootstrap,
    parse_group_id,
    parse_offset_reset,
    require_positive,
    resolve_auto_commit,
)


class ConsumerOptions(TypedDict, total=False):
    """The keyword options of ``Consumer`` and ``AsyncConsumer`` (defaults in ``build``)."""

    fetch_max_wait_ms: int
    fetch_min_bytes: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    max_poll_records: int
    auto_offset_reset: str
    request_timeout_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    check_crcs: bool
    group_id: str | None
    group_instance_id: str | None
    client_id: str
    enable_auto_commit: bool | None
    auto_commit_interval_ms: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    partition_assignment_strategy: str | list[str]
    metadata_max_age_ms: int
    exclude_internal_topics: bool
    default_api_timeout_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    bootstrap: list[tuple[str, int]]
    fetch_max_wait_ms: int
    fetch_min_bytes: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    max_poll_records: int
    auto_offset_reset: str
    request_timeout_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    check_crcs: bool
    group_id: str | None = None
    group_instance_id: str | None = None
    client_id: str = "strom-consumer"
    enable_auto_commit: bool = False
    auto_commit_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000
    partition_assignment_strategy: tuple[str, ...] = ("range", "cooperative-sticky")
    metadata_max_age_ms: int = 300000
    exclude_internal_topics: bool = True
    #: Kafka's default.api.timeout.ms; also how long joining a group may keep failing with
    #: errors (coordinator unavailable, metadata not stored) before poll() raises the last one.
    default_api_timeout_ms: int = 60000

    @property
    def cooperative(self) -> bool:
        """Kafka's rule: the cooperative protocol only when every configured assignor
        supports it (the default [range, cooperative-sticky] therefore rebalances eagerly)."""
        return all(a in COOPERATIVE_ASSIGNORS for a in self.partition_assignment_strategy)

    @classmethod
    def build(cls, bootstrap_servers: str | list[str], *, fetch_max_wait_ms: int = 500,
              fetch_min_bytes: int = 1, fetch_max_bytes: int = 52428800,
              max_partition_fetch_bytes: int = 1048576, max_poll_records: int = 500,
              auto_offset_reset: str = "latest", request_timeout_ms: int = 30000,
              retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
              check_crcs: bool = True, group_id: str | None = None,
              group_instance_id: str | None = None, client_id: str = "strom-consumer",
              enable_auto_commit: bool | None = None, auto_commit_interval_ms: int = 5000,
              session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 3000,
              max_poll_interval_ms: int = 300000,
              partition_assignment_strategy: str | list[str] = "range,cooperative-sticky",
              metadata_max_age_ms: int = 300000,
              exclude_internal_topics: bool = True,
              default_api_timeout_ms: int = 60000) -> ConsumerSettings:
        """Validate the options (one place for their defaults, shared by both consumers)."""
        group = parse_group_id("group_id", group_id)
        instance = parse_group_id("group_instance_id", group_instance_id)
        if instance is not None and group is None:
            raise InvalidOption(f"group_instance_id={instance!r} needs a group_id (static "
                                f"membership is membership of a group); set group_id")
        session = require_positive("session_timeout_ms", session_timeout_ms)
        heartbeat = require_positive("heartbeat_interval_ms", heartbeat_interval_ms)
        if heartbeat >= session:
            raise InvalidOption(f"heartbeat_interval_ms={heartbeat} must be lower than "
                                f"session_timeout_ms={session} (Kafka advises at most a third)")
        return cls(
            bootstrap=parse_bootstrap(bootstrap_servers),
            fetch_max_wait_ms=max(0, fetch_max_wait_ms),
            fetch_min_bytes=max(0, fetch_min_bytes),
            fetch_max_bytes=require_positive("fetch_max_bytes", fetch_max_bytes),
            max_partition_fetch_bytes=require_positive("max_partition_fetch_bytes",
                                                       max_partition_fetch_bytes),
            max_poll_records=require_positive("max_poll_records", max_poll_records),
            auto_offset_reset=parse_offset_reset(auto_offset_reset),
            request_timeout_ms=require_positive("request_timeout_ms", request_timeout_ms),
            retry_backoff_ms=max(0, retry_backoff_ms),
            retry_backoff_max_ms=max(retry_backoff_ms, retry_backoff_max_ms),
            check_crcs=check_crcs,
            group_id=group,
            group_instance_id=instance,
            client_id=client_id or "strom-consumer",
            enable_auto_commit=resolve_auto_commit(group, enable_auto_commit),
            auto_commit_interval_ms=require_positive("auto_commit_interval_ms",
                                                     auto_commit_interval_ms),
            session_timeout_ms=session,
            heartbeat_interval_ms=heartbeat,
            max_poll_interval_ms=require_positive("max_poll_interval_ms", max_poll_interval_ms),
            partition_assignment_strategy=parse_assignment_strategy(
                partition_assignment_strategy),
            metadata_max_age_ms=require_positive("metadata_max_age_ms", metadata_max_age_ms),
            exclude_internal_topics=exclude_internal_topics,
            default_api_timeout_ms=require_positive("default_api_timeout_ms",
                                                    default_api_timeout_ms),
        )
