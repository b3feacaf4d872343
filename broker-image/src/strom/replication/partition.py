"""One hosted partition replica as the replica manager sees it: view, log, role, leader state.

Plain state plus the decisions that need only this state (follower fetch bookkeeping, ISR
change proposals, high watermark moves); the manager does the I/O (alter_isr calls, fetcher
tasks, wake-ups). Owned by the event loop's thread, no locks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.replication import isr
from strom.replication.state import NO_LEADER, PartitionView
from strom.storage.log import PartitionLog


@dataclass
class Partition:
    view: PartitionView
    log: PartitionLog
    broker_id: int
    followers: dict[int, isr.FollowerState] = field(default_factory=dict)
    """Leader only: what each other replica last fetched."""
    epoch_start_offset: int = 0
    """Leader only: log end offset when this broker became leader for ``view.leader_epoch``."""
    led_epoch: int = -1
    """The epoch this broker became leader in (-1: not leading)."""
    pending_isr: tuple[int, ...] | None = None
    """An ISR change sent to the controller and not yet answered (at most one)."""
    leaderships: int = 0
    """Bumped whenever this broker stops leading: an acks=all wait that saw it change fails."""
    fetch_lag: int = 0
    """Follower only: records behind the leader's log end offset at the last fetch."""

    @property
    def is_leader(self) -> bool:
        return self.view.leader == self.broker_id and self.led_epoch == self.view.leader_epoch

    @property
    def offline(self) -> bool:
        return self.view.leader == NO_LEADER

    def become_leader(self, now_ms: int) -> None:
        """New leader epoch (Kafka ``makeLeader``): followers' positions are forgotten unless
        this broker already led (then only their caught-up times restart)."""
        was_leader = self.led_epoch >= 0
        self.led_epoch = self.view.leader_epoch
        self.epoch_start_offset = self.log.log_end_offset
        self.pending_isr = None
        followers = {}
        for r in self.assigned():
            if r == self.broker_id:
                continue
            fresh = isr.reset(r in self.view.isr, now_ms)
            old = self.followers.get(r)
            if was_leader and old is not None:
                fresh = isr.FollowerState(log_end_offset=old.log_end_offset,
                                          last_caught_up_ms=fresh.last_caught_up_ms)
            followers[r] = fresh
        self.followers = followers
        self.log.high_watermark = self.log.high_watermark  # the leader manages it from now on

    def update_assignment(self, now_ms: int) -> None:
        """Same epoch, new replica set: track new replicas, drop removed ones."""
        assigned = self.assigned()
        for r in assigned:
            if r != self.broker_id and r not in self.followers:
                self.followers[r] = isr.reset(r in self.view.isr, now_ms)
        for r in [r for r in self.followers if r not in assigned]:
            del self.followers[r]

    def resign(self) -> None:
        if self.led_epoch >= 0:
            self.leaderships += 1
        self.led_epoch = -1
        self.followers = {}
        self.pending_isr = None

    def assigned(self) -> set[int]:
        return set(self.view.replicas) | set(self.view.adding)

    def maximal_isr(self) -> set[int]:
        return isr.maximal_isr(self.view.isr, self.pending_isr)

    def advance_high_watermark(self) -> bool:
        """Move the high watermark up if the maximal ISR allows; True if it moved."""
        plog = self.log
        old = plog.high_watermark
        in_sync = self.view.isr
        if self.pending_isr is None and len(in_sync) == 1 and in_sync[0] == self.broker_id:
            new = max(old, plog.log_end_offset)  # the leader alone: isr.high_watermark's answer
        else:
            new = isr.high_watermark(old, self.broker_id, plog.log_end_offset,
                                     self.maximal_isr(), self.followers)
        if new > old:
            plog.high_watermark = new
            return True
        return False

    def isr_to_expand(self, replica: int) -> tuple[int, ...] | None:
        """The ISR with ``replica`` added, if it may join now and no change is pending."""
        if self.pending_isr is not None or replica in self.view.isr:
            return None
        if replica not in self.assigned() or replica in self.view.offline:
            return None
        state = self.followers.get(replica)
        if state is None or not isr.can_join(state, self.log.high_watermark,
                                             self.epoch_start_offset):
            return None
        return (*self.view.isr, replica)

    def isr_to_shrink(self, now_ms: int, lag_max_ms: int) -> tuple[int, ...] | None:
        """The ISR without lagging followers, if any lag and no change is pending."""
        if self.pending_isr is not None:
            return None
        lagging = isr.out_of_sync(self.view.isr, self.broker_id, self.followers,
                                  self.log.log_end_offset, now_ms, lag_max_ms)
        if not lagging:
            return None
        return tuple(r for r in self.view.isr if r not in lagging)

    def isr_at_log_end(self) -> bool:
        """Is every in-sync follower known to be at the log end offset (none can lag)?"""
        return isr.all_at_end(self.view.isr, self.broker_id, self.followers,
                              self.log.log_end_offset)

    def under_replicated(self) -> bool:
        return self.is_leader and len(self.view.isr) < len(self.view.replicas)
