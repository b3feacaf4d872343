"""What ``Consumer`` and ``AsyncConsumer`` share: every consumer rule that does not wait.

The two fronts differ only in how they wait (a condition variable and a private loop thread for
the synchronous one, the caller's event loop for the asyncio one), so each rule lives here once:
assignment and seeks, subscription checks, the commit-callback queue and auto-commit timing, the
prelude of ``poll()``, position checks and the listener calls owed on leaving. A front supplies
``_schedule`` (run a function on the fetcher's loop) and ``_ready`` (refuse a closed consumer,
start what must be started) and keeps its waiting loops.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Unpack

from strom.client.consumer_settings import ConsumerOptions, ConsumerSettings
from strom.client.fetcher import ConsumerCore
from strom.client.group_member import (
    GroupMember,
    check_listener,
    compile_subscription,
    mixed_error,
    no_group_error,
    validate_offsets,
)
from strom.client.group_state import RebalanceCallbacks
from strom.client.models import TopicPartition
from strom.protocol.errors import ErrorCode, StromError

CommitCallback = Callable[[dict[TopicPartition, int], BaseException | None], object]


class ConsumerFront:
    """The state and non-waiting rules of a consumer; subclasses add the waiting."""

    def __init__(self, bootstrap_servers: str | list[str],
                 **options: Unpack[ConsumerOptions]) -> None:
        self._settings = ConsumerSettings.build(bootstrap_servers, **options)
        self._core = ConsumerCore(self._settings, self._notify)
        self._closed = False
        self._timeout_s = self._settings.request_timeout_ms / 1000.0
        self._group = (GroupMember(self._settings, self._core)
                       if self._settings.group_id is not None else None)
        self._listener: object | None = None
        self._manual = False
        self._commit_done: deque[tuple[CommitCallback, dict[TopicPartition, int],
                                       BaseException | None]] = deque()
        self._next_auto_commit = time.monotonic() + self._settings.auto_commit_interval_ms / 1e3

    # --- what a front supplies -----------------------------------------------------------
    def _notify(self) -> None:
        """Fetcher loop: records, an error or a position arrived (wake a waiting caller)."""
        raise NotImplementedError

    def _schedule(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the fetcher's loop, without waiting for it."""
        raise NotImplementedError

    def _ready(self) -> None:
        """Refuse a closed consumer (and start the fetcher if the front starts lazily)."""
        if self._closed:
            raise StromError(ErrorCode.INVALID_REQUEST, "the consumer is closed")

    # --- assignment and positions --------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing any previous assignment)."""
        self._ready()
        tps = [TopicPartition(*tp) for tp in partitions]
        if self._group is not None and self._group.subscribed:
            raise mixed_error()
        self._manual = bool(tps)
        with self._core.subs.lock:
            self._core.subs.assign(tps)
        self._core.resets_held = bool(tps)  # until the next poll, position or seek
        self._schedule(self._core.cancel_fetches)

    def assignment(self) -> set[TopicPartition]:
        with self._core.subs.lock:
            return set(self._core.subs.states)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Next ``poll()`` returns ``partition`` from ``offset`` (or OFFSET_BEGINNING / _END)."""
        self._seek_all([partition], offset)

    def _seek_all(self, partitions: Iterable[TopicPartition], offset: int) -> None:
        """``seek`` of many partitions under one lock with one wake-up of the fetcher, so
        their resets go out as one ListOffsets (seeking one by one, the fetcher woke in the
        middle and split them in two waves); the assignment when ``partitions`` is empty."""
        self._ready()
        subs = self._core.subs
        with subs.lock:
            subs.seek_many([TopicPartition(*tp) for tp in partitions] or list(subs.states),
                           offset)
        self._core.resets_held = False
        self._schedule(self._core.cancel_fetches)

    def _known_position(self, partition: TopicPartition) -> int | None:
        """The position if resolved; None while a reset is under way; raises a fetch error or
        when there is no position and nothing will resolve one."""
        subs = self._core.subs
        with subs.lock:
            st = subs.state(partition)
            if st.position is not None:
                return st.position
            self._core.resets_held = False  # the caller wakes the fetcher
            if subs.errors:
                raise subs.errors.popleft()
            if st.reset is None and not st.resetting:
                raise StromError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"{partition} has no position and auto_offset_reset="
                                 f"'none'; seek() first")
        return None

    @staticmethod
    def _position_timeout(partition: TopicPartition) -> StromError:
        return StromError(ErrorCode.REQUEST_TIMED_OUT,
                          f"could not resolve the position of {partition}")

    @staticmethod
    def _timestamp_request(timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """``offsets_for_times``' argument checked (Kafka refuses negative timestamps)."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise StromError(ErrorCode.INVALID_TIMESTAMP,
                                 f"offsets_for_times: timestamp {ts} for {tp} must be >= 0")
        return {TopicPartition(*tp): ts for tp, ts in timestamps.items()}

    @staticmethod
    def _offsets_and_times(found: dict[TopicPartition, tuple[int, int]]
                           ) -> dict[TopicPartition, tuple[int, int] | None]:
        return {tp: (None if off < 0 else (off, ts)) for tp, (off, ts) in found.items()}

    # --- consumer groups -----------------------------------------------------------------
    def _member(self, call: str) -> GroupMember:
        """The group membership, or the error for ``call`` on a consumer without ``group_id``."""
        self._ready()
        if self._group is None:
            raise no_group_error(call)
        return self._group

    def _start_subscription(self, topics: list[str] | None, pattern: str | re.Pattern[str] | None,
                            listener: object | None) -> bool:
        """Check and record a subscription; False when it names no topic (the front decides
        what an empty subscription means)."""
        g = self._member("subscribe()")
        if self._manual:
            raise mixed_error()
        names, compiled = compile_subscription(topics, pattern)
        check_listener(listener)
        if compiled is None and not names:
            return False
        self._listener = listener
        g.subscribe(names, compiled)
        self._schedule(self._core.wake)
        return True

    def subscription(self) -> set[str]:
        """The topics subscribed to (for a pattern: those it matched at the last check)."""
        g = self._group
        return set(g.state.topics) if g is not None and g.subscribed else set()

    def _drop_assignment(self) -> None:
        """The end of ``unsubscribe()``: no manual assignment, no partitions, no fetches."""
        self._manual = False
        with self._core.subs.lock:
            self._core.subs.assign([])
        self._schedule(self._core.cancel_fetches)

    def commit_async(self, offsets: Mapping[TopicPartition, int] | None = None,
                     callback: CommitCallback | None = None) -> None:
        """Commit without waiting; ``callback(offsets, error_or_None)`` runs in a later
        ``poll()`` (or ``commit()``/``close()``) on the caller's thread or task."""
        g = self._member("commit_async()")
        wanted = None if offsets is None else validate_offsets(offsets)

        def done(committed: dict[TopicPartition, int], error: BaseException | None) -> None:
            if callback is not None:
                self._commit_done.append((callback, committed, error))
                self._notify()

        self._schedule(g.commit_in_background, wanted, done)

    def _commit_request(self, offsets: Mapping[TopicPartition, int] | None
                        ) -> tuple[GroupMember, dict[TopicPartition, int] | None]:
        """``commit()``'s checks, after the callbacks of earlier asynchronous commits ran."""
        g = self._member("commit()")
        self._run_commit_callbacks()
        return g, None if offsets is None else validate_offsets(offsets)

    def _run_commit_callbacks(self) -> None:
        while self._commit_done:
            callback, offsets, error = self._commit_done.popleft()
            callback(offsets, error)

    def _maybe_auto_commit(self, g: GroupMember) -> None:
        if not self._settings.enable_auto_commit:
            return
        now = time.monotonic()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self._settings.auto_commit_interval_ms / 1000.0
        if (g.subscribed and g.state.generation >= 0 and not g.state.rejoin_needed) or (
                self._manual and not g.subscribed):
            self._schedule(g.commit_in_background, None, None)

    def _poll_prelude(self) -> GroupMember | None:
        """The start of every ``poll()``: positions an assign() left unresolved are looked up,
        the member is alive, owed commit callbacks run, an auto-commit is started when due."""
        if self._core.resets_held:  # the first poll after assign(): resolve positions
            self._core.resets_held = False
            self._schedule(self._core.wake)
        g = self._group
        if g is not None:
            g.polled()
            self._run_commit_callbacks()
            self._maybe_auto_commit(g)
        return g

    def _commit_on_close(self, g: GroupMember) -> bool:
        return self._settings.enable_auto_commit and (g.state.generation >= 0 or self._manual)

    @staticmethod
    def _leaving_callbacks(g: GroupMember) -> RebalanceCallbacks | None:
        """What the listener hears on leaving: the owned partitions revoked, or lost when the
        member has no generation any more."""
        owned = sorted(g.state.owned)
        if not owned:
            return None
        return (RebalanceCallbacks(revoked=owned) if g.state.generation >= 0
                else RebalanceCallbacks(lost=owned))
