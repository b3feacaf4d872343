"""Idempotent-producer state of one partition: who wrote which sequence numbers (KIP-98).

An idempotent producer stamps every batch with (producer id, epoch, base sequence); the sequence
counts records per partition. The leader keeps, per producer, its epoch and the last
``BATCHES_PER_PRODUCER`` batches it appended (Kafka keeps 5, the client's maximum in flight), so a
retried batch whose first answer was lost is recognised and answered with its original offsets
instead of being written twice, and a batch that skips or reorders sequences is refused.

The state is derived from the log alone (batch headers, never record bodies), so followers and a
restarted broker rebuild exactly what the leader had: after a failover the new leader still
recognises a retry the old leader accepted. Snapshots (``<offset:020d>.snapshot``: the state of
every batch below ``offset``) bound the rebuild to the log written since the last one.

Choices, as in Kafka >= 2.5 (KIP-360): a producer id the partition does not know (never seen, or
its state expired or was deleted with old segments) is accepted at any sequence, because refusing
it would make the producer fail with UNKNOWN_PRODUCER_ID after mere retention; an older epoch is
refused with INVALID_PRODUCER_EPOCH (Kafka uses PRODUCER_FENCED only for transactional ids); a
newer epoch must start at sequence 0.
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from strom.protocol.batch import BatchHeader
from strom.protocol.errors import ErrorCode, StromError

BATCHES_PER_PRODUCER = 5
NO_PRODUCER_ID = -1
DEFAULT_EXPIRATION_MS = 24 * 60 * 60 * 1000  # producer.id.expiration.ms
SNAPSHOT_SUFFIX = ".snapshot"
_SEQUENCE_MODULUS = 1 << 31  # sequences wrap from Integer.MAX_VALUE to 0, as in Kafka
_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")
_SNAPSHOT_VERSION = 1


def next_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping past 2**31 - 1 to 0 (Kafka's incrementSequence)."""
    return (sequence + increment) % _SEQUENCE_MODULUS


def last_sequence(h: BatchHeader) -> int:
    return next_sequence(h.base_sequence, h.last_offset_delta)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    """A batch the log already holds: answer with these offsets, write nothing."""

    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    last_timestamp: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=BATCHES_PER_PRODUCER))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


class ProducerStateManager:
    """Per-producer sequence state of one partition; pure (no I/O apart from the helpers below).

    ``end_offset`` is the offset up to which the state reflects the log (exclusive).
    """

    def __init__(self, expiration_ms: int = DEFAULT_EXPIRATION_MS, end_offset: int = 0) -> None:
        self.expiration_ms = expiration_ms
        self.end_offset = end_offset
        self.producers: dict[int, ProducerEntry] = {}

    # ---- leader checks ---------------------------------------------------------------------

    def check(self, h: BatchHeader) -> DuplicateBatch | None:
        """Validate one client batch before it is appended; raises StromError if refused."""
        return self.check_all([h])

    def check_all(self, headers: Sequence[BatchHeader]) -> DuplicateBatch | None:
        """Validate the batches of one append, in order; all or nothing.

        Returns the original offsets if the append is a single batch the log already holds. A
        duplicate among several batches is refused with DUPLICATE_SEQUENCE_NUMBER (clients send
        one batch per partition per request, so this only happens with hand-made requests).
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) so far
        for h in headers:
            pid = h.producer_id
            if pid == NO_PRODUCER_ID:
                continue
            if h.base_sequence < 0:
                raise StromError(
                    ErrorCode.INVALID_RECORD,
                    f"record batch at byte {h.position} has producer id {pid} but base sequence "
                    f"{h.base_sequence}; an idempotent batch needs a sequence >= 0")
            entry = self.producers.get(pid)
            if pid in pending:
                epoch, last = pending[pid]
            elif entry is not None:
                epoch, last = entry.epoch, entry.last_seq
            else:
                epoch, last = -1, -1
            first, final = h.base_sequence, last_sequence(h)
            if epoch >= 0 and h.producer_epoch < epoch:
                raise StromError(
                    ErrorCode.INVALID_PRODUCER_EPOCH,
                    f"producer {pid} sent epoch {h.producer_epoch} but epoch {epoch} is already "
                    f"in the log; a newer producer instance took over (fenced), re-initialise it")
            if pid not in pending and entry is not None and h.producer_epoch == entry.epoch:
                dup = entry.find(first, final)
                if dup is not None:
                    if len(headers) > 1:
                        raise StromError(
                            ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
                            f"batch of producer {pid} with sequences {first}..{final} is already "
                            f"at offsets {dup.first_offset}..{dup.last_offset}; send one batch "
                            f"per partition per request")
                    return DuplicateBatch(dup.first_offset, dup.last_offset)
            if epoch < 0:
                pass  # unknown producer (or expired / deleted state): any sequence (KIP-360)
            elif h.producer_epoch != epoch:
                if first != 0:
                    raise StromError(
                        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"producer {pid} started epoch {h.producer_epoch} at sequence {first}; "
                        f"a new epoch must start at sequence 0")
            elif last >= 0 and first != next_sequence(last, 1):
                raise StromError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {pid} epoch {epoch} sent sequence {first} but the next expected "
                    f"is {next_sequence(last, 1)}; records were lost or reordered between the "
                    f"producer and the broker")
            pending[pid] = (h.producer_epoch, final)
        return None

    # ---- state updates (leader and follower) -----------------------------------------------

    def update(self, h: BatchHeader) -> None:
        """Record a batch the log now holds (``h`` carries its assigned offsets)."""
        if h.next_offset > self.end_offset:
            self.end_offset = h.next_offset
        pid = h.producer_id
        if pid == NO_PRODUCER_ID or h.is_control:
            return
        entry = self.producers.get(pid)
        if entry is None or h.producer_epoch != entry.epoch:
            entry = self.producers[pid] = ProducerEntry(pid, h.producer_epoch, h.max_timestamp)
        entry.batches.append(BatchMetadata(h.base_sequence, last_sequence(h), h.base_offset,
                                           h.last_offset))
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)

    def update_all(self, headers: Iterable[BatchHeader]) -> None:
        for h in headers:
            self.update(h)

    def expire(self, now_ms: int) -> int:
        """Forget producers idle over ``expiration_ms``; returns how many."""
        horizon = now_ms - self.expiration_ms
        doomed = [pid for pid, e in self.producers.items() if e.last_timestamp < horizon]
        for pid in doomed:
            del self.producers[pid]
        return len(doomed)

    def clear(self, end_offset: int) -> None:
        self.producers.clear()
        self.end_offset = end_offset

    # ---- snapshots -------------------------------------------------------------------------

    def to_snapshot(self) -> bytes:
        """``<crc32c hex>\\n<json>``: the state of every batch below ``end_offset``."""
        body = json.dumps({
            "version": _SNAPSHOT_VERSION,
            "end_offset": self.end_offset,
            "producers": [
                [e.producer_id, e.epoch, e.last_timestamp,
                 [[b.first_seq, b.last_seq, b.first_offset, b.last_offset] for b in e.batches]]
                for e in self.producers.values()],
        }, separators=(",", ":")).encode()
        return b"%08x\n" % crc32c.crc32c(body) + body

    @classmethod
    def from_snapshot(cls, data: bytes, expiration_ms: int = DEFAULT_EXPIRATION_MS
                      ) -> ProducerStateManager:
        """Parse a snapshot; raises ValueError if it is damaged or of an unknown version."""
        head, sep, body = data.partition(b"\n")
        if not sep or len(head) != 8 or int(head, 16) != crc32c.crc32c(body):
            raise ValueError("producer state snapshot fails its CRC-32C check")
        doc = json.loads(body)
        if doc.get("version") != _SNAPSHOT_VERSION:
            raise ValueError(f"producer state snapshot version {doc.get('version')} is unknown")
        self = cls(expiration_ms, int(doc["end_offset"]))
        for pid, epoch, ts, batches in doc["producers"]:
            entry = ProducerEntry(int(pid), int(epoch), int(ts))
            entry.batches.extend(BatchMetadata(*map(int, b)) for b in batches)
            self.producers[entry.producer_id] = entry
        return self


# ---- snapshot files (the log calls these) ---------------------------------------------------

def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(directory: Path, names: Iterable[str] | None = None) -> list[int]:
    """Offsets of the snapshots in ``directory`` (``names``: its listing, if already read)."""
    found = []
    for name in os.listdir(directory) if names is None else names:
        match = _SNAPSHOT_FILE.match(name)
        if match:
            found.append(int(match.group(1)))
    return sorted(found)


def write_snapshot(directory: Path, state: ProducerStateManager, *, sync: bool = True) -> Path:
    """Write atomically (tmp + fsync + rename) the snapshot named after ``state.end_offset``;
    ``sync=False``: no fsync, the caller makes the file system durable afterwards."""
    path = snapshot_path(directory, state.end_offset)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, state.to_snapshot())
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def delete_snapshots(directory: Path, *, below: int | None = None,
                     above: int | None = None, names: Iterable[str] | None = None) -> None:
    for offset in snapshot_offsets(directory, names):
        if (below is not None and offset < below) or (above is not None and offset > above):
            snapshot_path(directory, offset).unlink(missing_ok=True)


def load_latest(directory: Path, at_most: int, expiration_ms: int,
                names: Iterable[str] | None = None) -> ProducerStateManager | None:
    """The newest readable snapshot at or below ``at_most`` (damaged ones are deleted)."""
    for offset in reversed(snapshot_offsets(directory, names)):
        if offset > at_most:
            continue
        path = snapshot_path(directory, offset)
        try:
            state = ProducerStateManager.from_snapshot(path.read_bytes(), expiration_ms)
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if state.end_offset == offset:
            return state
        path.unlink(missing_ok=True)
    return None
