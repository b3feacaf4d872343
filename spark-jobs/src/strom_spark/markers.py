"""Commit markers of the streaming sink: what a committed micro-batch leaves behind (pure logic).

Spark re-runs the last micro-batch of a query after a restart when the batch's entry in the
checkpoint's ``commits/`` log is missing, even if the sink had already committed it (the driver
stopped between the sink's ``commit(batchId)`` and Spark's own commit-log write). To make that
replay write nothing, the driver records every committed batch as one small record in a compacted
marker topic, keyed on the query id (Spark's ``StreamingQuery.id``: stable across restarts
because it lives in the checkpoint, new for a new checkpoint). Micro-batch ids of one query grow
one by one and are committed in order, so the newest marker of a query names the highest
committed batch; a task of batch ``N`` writes nothing when that batch is ``>= N``.

Each record the stream writer sends also carries headers naming its query, batch and writer (one
task attempt), and the marker lists the writers whose output the batch committed: a consumer that
must also remove the duplicates this scheme cannot prevent (see :mod:`strom_spark.sink`) drops
records whose writer is not listed in their batch's marker.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

#: Default marker topic; ``__``-prefixed, so it is internal (hidden from plain topic listings).
DEFAULT_COMMIT_TOPIC = "__strom_spark_commits"

#: Headers every streamed record carries (values are UTF-8 text).
HEADER_QUERY = "strom.spark.query"
HEADER_BATCH = "strom.spark.batch"
HEADER_WRITER = "strom.spark.writer"

#: Topic configs of the marker topic: compacted (the newest marker per query is what tasks ask
#: for), with small segments so compaction can run soon and the tail a task scans stays short.
COMMIT_TOPIC_CONFIGS: dict[str, str] = {
    "cleanup.policy": "compact",
    "segment.bytes": str(1024 * 1024),
    "segment.ms": str(10 * 60 * 1000),
    "retention.ms": "-1",
}

#: How many marker records a task reads per step while scanning the marker topic backwards.
SCAN_STEP = 512


@dataclass(frozen=True, slots=True)
class CommitMarker:
    """One committed micro-batch of one query (the marker record's key is ``query``)."""

    query: str
    batch: int
    records: int = 0
    #: Writer ids (one per task attempt) whose records make up the committed batch.
    writers: tuple[str, ...] = field(default=())
    committed_at_ms: int = 0

    def key(self) -> bytes:
        return self.query.encode()

    def value(self) -> bytes:
        return json.dumps(
            {
                "query": self.query,
                "batch": self.batch,
                "records": self.records,
                "writers": list(self.writers),
                "committedAtMs": self.committed_at_ms,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> CommitMarker | None:
        """The marker in a record, or None for a tombstone or a record that is not a marker."""
        if key is None or value is None:
            return None
        try:
            doc = json.loads(value)
            query, batch = doc["query"], doc["batch"]
            if not isinstance(query, str) or query != key.decode() or not isinstance(batch, int):
                return None
            writers = doc.get("writers", [])
            return cls(
                query=query,
                batch=batch,
                records=int(doc.get("records", 0)),
                writers=tuple(str(w) for w in writers) if isinstance(writers, list) else (),
                committed_at_ms=int(doc.get("committedAtMs", 0)),
            )
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return None


def latest_marker(
    records: Iterable[tuple[bytes | None, bytes | None]], query: str
) -> CommitMarker | None:
    """The last marker of ``query`` among ``(key, value)`` pairs given in offset order."""
    wanted = query.encode()
    found: CommitMarker | None = None
    for key, value in records:
        if key != wanted:
            continue
        marker = CommitMarker.decode(key, value)
        if marker is not None:
            found = marker
    return found


def scan_windows(earliest: int, end: int, step: int = SCAN_STEP) -> Iterator[tuple[int, int]]:
    """``[start, end)`` windows from the log end back to ``earliest``, newest first."""
    if step < 1:
        raise ValueError(f"step={step} must be >= 1")
    hi = end
    while hi > earliest:
        lo = max(earliest, hi - step)
        yield lo, hi
        hi = lo


def already_committed(batch: int, marker: CommitMarker | None) -> bool:
    """Whether batch ``batch`` of the marker's query was committed (ids grow, commits in order)."""
    return marker is not None and marker.batch >= batch


def batch_headers(query: str, batch: int, writer: str) -> tuple[tuple[str, bytes], ...]:
    return (
        (HEADER_QUERY, query.encode()),
        (HEADER_BATCH, str(batch).encode()),
        (HEADER_WRITER, writer.encode()),
    )
