"""Committed offsets and group metadata as records of the compacted ``__consumer_offsets`` topic.

Committed offsets must survive the coordinator (DESIGN § 4), so -- as in Kafka -- they are not kept
in a side database but appended to the group's partition of ``__consumer_offsets``, a compacted
topic replicated like any other. A broker that becomes leader of that partition replays it to
rebuild every group's offsets and last known membership; compaction keeps only the latest record
per key, and a tombstone (null value) deletes a key for good.

This module is the pure part: the byte layout of keys and values (Kafka's own schemas: offset-commit
key v1, group-metadata key v2, offset-commit value v3, group-metadata value v3, with the members'
subscriptions and assignments in Kafka's ConsumerProtocol v0), an in-memory ``OffsetStore`` that
turns commits / deletes / expiry into records to append and applies records (live or replayed) to
its maps, and ``partition_for_group``. Appending the records and waiting for them to be committed
is the driver's job; apply a record only after it is durable, exactly as replay would.

Expiry follows Kafka >= 2.1 (KIP-211): offsets of a consumer group live while the group has
members; once it is empty they expire ``offsets.retention.minutes`` after it became empty (after
the commit, for groups never seen with members, i.e. standalone commits). When a group's last
offset goes and it is empty, its metadata is tombstoned too.

Group metadata is persisted from ``Group.snapshot()`` (``group_metadata_from_snapshot``) and turned
back into a ``Group`` on failover (``snapshot_from_group_metadata`` then ``Group.restore``), so
surviving consumers keep their generation and partitions when the coordinator moves.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from strom.groups.membership import GroupSnapshot, GroupState, MemberDescription, Subscription
from strom.protocol.errors import ErrorCode, StromError

TopicPartition = tuple[str, int]

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3
DEFAULT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000  # offsets.retention.minutes = 10080


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap), as a signed int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_group(group_id: str, n_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``.

    ``Utils.abs`` is ``h & 0x7fffffff`` (not ``Math.abs``), so Integer.MIN_VALUE maps to 0.
    """
    return (java_string_hash(group_id) & 0x7FFFFFFF) % n_partitions


# ---- primitive codec (Kafka's "struct" types: big-endian, int16-prefixed strings) -------------


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def i16(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">h", v))
        return self

    def i32(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">i", v))
        return self

    def i64(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">q", v))
        return self

    def string(self, v: str | None) -> _Writer:
        if v is None:
            return self.i16(-1)
        raw = v.encode()
        self.i16(len(raw))
        self.parts.append(raw)
        return self

    def blob(self, v: bytes | None) -> _Writer:
        if v is None:
            return self.i32(-1)
        self.i32(len(v))
        self.parts.append(v)
        return self

    def done(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise StromError(ErrorCode.CORRUPT_MESSAGE, "truncated __consumer_offsets record")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def i32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def i64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._take(n).decode()

    def required_string(self) -> str:
        s = self.string()
        if s is None:
            raise StromError(ErrorCode.CORRUPT_MESSAGE, "null where a string is required")
        return s

    def blob(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self._take(n)


# ---- keys and values ------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    commit_timestamp_ms: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    topics: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]
    # The bytes Kafka stores (the selected protocol's metadata, the leader's assignment), when a
    # Kafka-protocol member sent them: written as they are, so a ``connect`` group's or Kafka
    # Streams' data survives a coordinator failover. Empty: encoded from the fields above.
    subscription_data: bytes = b""
    assignment_data: bytes = b""


@dataclass(frozen=True)
class GroupMetadata:
    protocol_type: str
    generation: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: tuple[StoredMember, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.members


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    if isinstance(key, OffsetKey):
        return (
            _Writer()
            .i16(OFFSET_KEY_VERSION)
            .string(key.group_id)
            .string(key.topic)
            .i32(key.partition)
            .done()
        )
    return _Writer().i16(GROUP_KEY_VERSION).string(key.group_id).done()


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.required_string(), r.required_string(), r.i32())
    if version == 2:
        return GroupKey(r.required_string())
    raise StromError(ErrorCode.CORRUPT_MESSAGE, f"unknown __consumer_offsets key version {version}")


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    return (
        _Writer()
        .i16(OFFSET_VALUE_VERSION)
        .i64(value.offset)
        .i32(value.leader_epoch)
        .string(value.metadata)
        .i64(value.commit_timestamp_ms)
        .done()
    )


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    r = _Reader(data)
    version = r.i16()
    if version != OFFSET_VALUE_VERSION:
        raise StromError(ErrorCode.CORRUPT_MESSAGE, f"unsupported offset value version {version}")
    offset, epoch, metadata, ts = r.i64(), r.i32(), r.string(), r.i64()
    return OffsetAndMetadata(offset, ts, epoch, metadata or "")


def _encode_subscription(topics: tuple[str, ...]) -> bytes:
    """Kafka ConsumerProtocolSubscription v0: version, [topic], user data."""
    w = _Writer().i16(0).i32(len(topics))
    for t in topics:
        w.string(t)
    return w.blob(None).done()


def _decode_subscription(data: bytes) -> tuple[str, ...]:
    r = _Reader(data)
    r.i16()
    return tuple(r.required_string() for _ in range(r.i32()))


def _consumer_topics(protocol_type: str, data: bytes) -> tuple[str, ...]:
    """The topics of a consumer group member's stored subscription; () for other protocol types
    (a ``connect`` member's metadata is not a ConsumerProtocolSubscription) or unreadable bytes."""
    if protocol_type != "consumer" or not data:
        return ()
    try:
        return _decode_subscription(data)
    except (StromError, struct.error, UnicodeDecodeError, ValueError):
        return ()


def _consumer_assignment(protocol_type: str, data: bytes) -> tuple[TopicPartition, ...]:
    if protocol_type != "consumer" or not data:
        return ()
    try:
        return _decode_assignment(data)
    except (StromError, struct.error, UnicodeDecodeError, ValueError):
        return ()


def _encode_assignment(assignment: tuple[TopicPartition, ...]) -> bytes:
    """Kafka ConsumerProtocolAssignment v0: version, [topic, [partition]], user data."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    w = _Writer().i16(0).i32(len(by_topic))
    for topic, partitions in by_topic.items():
        w.string(topic).i32(len(partitions))
        for p in partitions:
            w.i32(p)
    return w.blob(None).done()


def _decode_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    r = _Reader(data)
    r.i16()
    out: list[TopicPartition] = []
    for _ in range(r.i32()):
        topic = r.required_string()
        out.extend((topic, r.i32()) for _ in range(r.i32()))
    return tuple(out)


def encode_group_value(value: GroupMetadata) -> bytes:
    w = (
        _Writer()
        .i16(GROUP_VALUE_VERSION)
        .string(value.protocol_type)
        .i32(value.generation)
        .string(value.protocol_name)
        .string(value.leader_id)
        .i64(value.state_timestamp_ms)
        .i32(len(value.members))
    )
    for m in value.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id)
        w.string(m.client_host).i32(m.rebalance_timeout_ms).i32(m.session_timeout_ms)
        w.blob(m.subscription_data or _encode_subscription(m.topics))
        w.blob(m.assignment_data or _encode_assignment(m.assignment))
    return w.done()


def decode_group_value(data: bytes) -> GroupMetadata:
    r = _Reader(data)
    version = r.i16()
    if version != GROUP_VALUE_VERSION:
        raise StromError(ErrorCode.CORRUPT_MESSAGE, f"unsupported group value version {version}")
    protocol_type, generation = r.string() or "", r.i32()
    protocol_name, leader_id, ts = r.string(), r.string(), r.i64()
    members = []
    for _ in range(r.i32()):
        member_id, instance_id = r.required_string(), r.string()
        client_id, client_host = r.string() or "", r.string() or ""
        rebalance_timeout, session_timeout = r.i32(), r.i32()
        subscription, assignment = r.blob() or b"", r.blob() or b""
        topics = _consumer_topics(protocol_type, subscription)
        partitions = _consumer_assignment(protocol_type, assignment)
        # Bytes that are just the encoding of the fields (a Strom member's) are not kept as the
        # member's own: only what a Kafka-protocol member sent is.
        if subscription == _encode_subscription(topics):
            subscription = b""
        if assignment == _encode_assignment(partitions):
            assignment = b""
        members.append(
            StoredMember(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                topics,
                partitions,
                subscription,
                assignment,
            )
        )
    return GroupMetadata(protocol_type, generation, protocol_name, leader_id, ts, tuple(members))


@dataclass(frozen=True)
class Record:
    """One record to append to (or replayed from) ``__consumer_offsets``; value None = tombstone."""

    key: bytes
    value: bytes | None


def offset_record(group_id: str, tp: TopicPartition, value: OffsetAndMetadata | None) -> Record:
    key = encode_key(OffsetKey(group_id, tp[0], tp[1]))
    return Record(key, None if value is None else encode_offset_value(value))


def group_record(group_id: str, value: GroupMetadata | None) -> Record:
    return Record(
        encode_key(GroupKey(group_id)), None if value is None else encode_group_value(value)
    )


# ---- the store ------------------------------------------------------------------------------


@dataclass
class OffsetStore:
    """All groups' committed offsets and metadata for one ``__consumer_offsets`` partition.

    Methods named for an operation return the records to append; ``apply`` changes state.
    """

    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    groups: dict[str, GroupMetadata] = field(default_factory=dict)

    @classmethod
    def load(cls, records: Iterable[Record]) -> OffsetStore:
        """Rebuild state by replaying a partition from its start (what a new coordinator does)."""
        store = cls()
        for record in records:
            store.apply(record)
        return store

    def apply(self, record: Record) -> None:
        key = decode_key(record.key)
        if isinstance(key, OffsetKey):
            tp = (key.topic, key.partition)
            if record.value is None:
                group = self.offsets.get(key.group_id)
                if group is not None:
                    group.pop(tp, None)
                    if not group:
                        del self.offsets[key.group_id]
            else:
                value = decode_offset_value(record.value)
                self.offsets.setdefault(key.group_id, {})[tp] = value
        elif record.value is None:
            self.groups.pop(key.group_id, None)
        else:
            self.groups[key.group_id] = decode_group_value(record.value)

    def commit(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> list[Record]:
        """Records for an OffsetCommit (check ``Group.validate_offset_commit`` first)."""
        for (topic, partition), value in offsets.items():
            if value.offset < 0:
                raise StromError(
                    ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
                    f"offset for {topic}-{partition} is {value.offset}; commit an offset >= 0",
                )
        return [offset_record(group_id, tp, value) for tp, value in sorted(offsets.items())]

    def fetch(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """OffsetFetch: the committed offset per partition, None where nothing is committed."""
        committed = self.offsets.get(group_id, {})
        if partitions is None:
            return dict(committed)
        return {tp: committed.get(tp) for tp in partitions}

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> list[Record]:
        """Tombstones for the committed offsets of ``partitions`` the group has (OffsetDelete;
        check the group's subscriptions first)."""
        committed = self.offsets.get(group_id, {})
        return [offset_record(group_id, tp, None) for tp in sorted(set(partitions))
                if tp in committed]

    def delete_group(self, group_id: str) -> list[Record]:
        """Tombstones for everything a group has (admin DeleteGroups; only when it is empty)."""
        records = [
            offset_record(group_id, tp, None) for tp in sorted(self.offsets.get(group_id, {}))
        ]
        if group_id in self.groups:
            records.append(group_record(group_id, None))
        return records

    def expire(self, now_ms: int, retention_ms: int = DEFAULT_RETENTION_MS) -> list[Record]:
        """Tombstones for offsets past retention in groups without members, and for such groups
        once their last offset goes."""
        records: list[Record] = []
        for group_id in sorted(set(self.offsets) | set(self.groups)):
            metadata = self.groups.get(group_id)
            if metadata is not None and not metadata.is_empty:
                continue
            committed = self.offsets.get(group_id, {})
            expired = []
            for tp, value in sorted(committed.items()):
                base = (
                    metadata.state_timestamp_ms
                    if metadata is not None and metadata.protocol_type
                    else value.commit_timestamp_ms
                )
                if now_ms - base >= retention_ms:
                    expired.append(tp)
            records.extend(offset_record(group_id, tp, None) for tp in expired)
            if metadata is not None and len(expired) == len(committed):
                records.append(group_record(group_id, None))
        return records


# ---- group metadata <-> the membership state machine ----------------------------------------


def group_metadata_from_snapshot(
    snapshot: GroupSnapshot, now_ms: int, client_hosts: Mapping[str, str] | None = None
) -> GroupMetadata:
    """The value to persist when a group enters Stable or Empty (``StateChanged``)."""
    hosts = client_hosts or {}
    return GroupMetadata(
        protocol_type=snapshot.protocol_type or "",
        generation=snapshot.generation,
        protocol_name=snapshot.protocol_name,
        leader_id=snapshot.leader_id,
        state_timestamp_ms=now_ms,
        members=tuple(
            StoredMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                hosts.get(m.member_id, ""),
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.subscription.topics,
                m.assignment,
                m.subscription.metadata_for(snapshot.protocol_name) or b"",
                m.assignment_data,
            )
            for m in snapshot.members
        ),
    )


def snapshot_from_group_metadata(group_id: str, value: GroupMetadata) -> GroupSnapshot:
    """What ``Group.restore`` needs, from a replayed group record."""
    return GroupSnapshot(
        group_id=group_id,
        state=GroupState.STABLE if value.members else GroupState.EMPTY,
        generation=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol_name,
        leader_id=value.leader_id,
        members=tuple(
            MemberDescription(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                Subscription(
                    m.topics,
                    protocol_metadata=((value.protocol_name, m.subscription_data),)
                    if value.protocol_name and m.subscription_data
                    else (),
                ),
                m.assignment,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                m.assignment_data,
            )
            for m in value.members
        ),
    )
