"""Where a follower's log stops agreeing with its leader's: KIP-320 / KIP-595 truncation, pure.

A follower sends its log end offset (``fetch_offset``) and the epoch of its last record
(``last_fetched_epoch``). The leader looks that epoch up in its own epoch history (Kafka's
OffsetsForLeaderEpoch answer: the largest epoch <= it and where that epoch ended on the leader);
if the leader ended that epoch earlier than the follower's log, or never had it, the follower's
tail diverges and the response says ``(epoch, end_offset)`` instead of carrying records. The
follower then cuts its log (:func:`truncation_offset`) and fetches again; repeated, this converges
on the longest common prefix, so a replica never keeps records the leader does not have.

Epoch histories are lists of ``(epoch, start_offset)``, both increasing (the leader-epoch cache).
The leader passes its history *including its current epoch* starting at the log end offset it
had when it became leader: Kafka writes that entry into the cache on election; we do not change
storage for it, :func:`with_current_epoch` adds it on the fly.

Differences from Kafka: when the follower's last epoch is newer than anything the leader knows
(Kafka answers diverging ``(-1, -1)`` and the follower truncates to its high watermark), the
leader is stale, so :func:`find_divergence` reports it as ``None`` and the caller answers
FENCED_LEADER_EPOCH; the follower waits for new metadata instead of truncating.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1

Epochs = Sequence[tuple[int, int]]


def end_offset_for(entries: Epochs, log_end_offset: int, epoch: int) -> tuple[int, int]:
    """Kafka's ``LeaderEpochFileCache.endOffsetFor``: (largest epoch <= ``epoch``, its end).

    (-1, -1) when ``epoch`` is undefined, the history is empty, or ``epoch`` is newer than every
    known epoch; ``(epoch, first start)`` when it is older than every known epoch.
    """
    if epoch == UNDEFINED_EPOCH or not entries:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if epoch == entries[-1][0]:
        return epoch, log_end_offset
    epochs = [e for e, _ in entries]
    higher = bisect.bisect_right(epochs, epoch)
    if higher >= len(entries):
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if higher == 0:
        return epoch, entries[0][1]
    return entries[higher - 1][0], entries[higher][1]


def with_current_epoch(entries: Epochs, leader_epoch: int, epoch_start_offset: int
                       ) -> list[tuple[int, int]]:
    """The leader's history as Kafka's cache would hold it right after the election."""
    out = list(entries)
    if leader_epoch >= 0 and (not out or out[-1][0] < leader_epoch):
        if out and out[-1][1] > epoch_start_offset:
            out = [(e, o) for e, o in out if o <= epoch_start_offset]
        out.append((leader_epoch, epoch_start_offset))
    return out


class StaleLeader(Exception):
    """The follower has records of an epoch the leader has never seen: the leader is stale."""


def find_divergence(leader_entries: Epochs, leader_log_end: int, last_fetched_epoch: int,
                    fetch_offset: int) -> tuple[int, int] | None:
    """Leader side: None if the follower's log agrees, else (epoch, end offset) to report.

    Raises :class:`StaleLeader` when the follower's epoch is unknown because it is newer.
    """
    if last_fetched_epoch < 0:
        return None  # an empty (or epoch-less) follower log cannot diverge; offsets decide
    epoch, end = end_offset_for(leader_entries, leader_log_end, last_fetched_epoch)
    if epoch == UNDEFINED_EPOCH:
        if leader_entries and last_fetched_epoch > leader_entries[-1][0]:
            raise StaleLeader(f"follower's last fetched epoch {last_fetched_epoch} is newer than "
                              f"the leader's latest epoch {leader_entries[-1][0]}")
        return None  # the leader has no history at all: the offset range check decides
    if epoch < last_fetched_epoch or end < fetch_offset:
        return epoch, end
    return None


def truncation_offset(follower_entries: Epochs, follower_log_end: int, diverging_epoch: int,
                      diverging_end_offset: int) -> int:
    """Follower side: where to cut the log after the leader reported a divergence.

    Kafka's ``getOffsetTruncationState``: if the follower knows the leader's epoch, cut at the
    smaller of the two end offsets for it; if not, cut at the end of the follower's largest
    epoch below it and fetch again (the next answer narrows it down further).
    """
    epoch, end = end_offset_for(follower_entries, follower_log_end, diverging_epoch)
    if epoch == UNDEFINED_EPOCH:
        return min(diverging_end_offset, follower_log_end)
    if epoch != diverging_epoch:
        return min(end, follower_log_end)
    return min(end, diverging_end_offset, follower_log_end)
