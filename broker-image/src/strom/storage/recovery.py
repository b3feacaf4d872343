"""Bringing a partition directory back to a consistent state when it is opened.

A broker can die mid-write, so the tail of a log may hold a torn or corrupt batch, and files from an
interrupted compaction or checkpoint may lie around. This module decides what to trust:

* Leftovers are removed: ``*.cleaned`` (an unfinished compaction rewrite: the original segment is
  still in place), ``*.tmp`` (an unfinished checkpoint), and index files without a ``.log``.
* After a clean shutdown (marker present) every segment is trusted up to its last index entry and
  only the short tail after it is walked, with CRC checks.
* Otherwise every segment from the one holding the recovery point (everything before it was
  fsynced) is scanned in full: length, magic, record count, offset order, relative-offset range and
  CRC-32C. At the first bad batch the segment is truncated there and every later segment deleted,
  and what was dropped is logged at WARNING.
* A missing or damaged ``.index``/``.timeindex`` (wrong size multiple, non-monotonic, pointing past
  the file or at no batch) is rebuilt from the log whatever the shutdown was.

What cannot be detected: the leader epoch field (bytes 12..15) is outside the CRC, so its
corruption goes unnoticed (as in Kafka). The base offset is outside the CRC too; in a log that was
never compacted offsets must be contiguous, so any change is caught, but in a compacted topic gaps
are legal and a corruption that keeps offsets increasing and in range is not detectable.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from strom.protocol.batch import BatchHeader
from strom.storage.checkpoint import TMP_SUFFIX
from strom.storage.config import LogConfig
from strom.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
_PROGRESS_SECONDS = 5.0


def remove_leftovers(directory: Path, names: list[str] | None = None) -> list[str]:
    """Remove leftover files; returns the names that remain (``names``: the directory's
    listing, if already read: one listing serves the whole open of a log)."""
    names = os.listdir(directory) if names is None else names
    logs = {n[: -len(LOG_SUFFIX)] for n in names if n.endswith(LOG_SUFFIX)}
    kept = []
    for name in names:
        stale = name.endswith((CLEANED_SUFFIX, TMP_SUFFIX, DELETED_SUFFIX))
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            if name.endswith(suffix) and name[: -len(suffix)] not in logs:
                stale = True
        path = directory / name
        if stale and path.is_file():
            log.info("removing leftover file %s", path)
            path.unlink()
        else:
            kept.append(name)
    return kept


def segment_bases(directory: Path, names: list[str] | None = None) -> list[int]:
    bases = []
    for name in os.listdir(directory) if names is None else names:
        match = _SEGMENT_FILE.match(name)
        if match:
            bases.append(int(match.group(1)))
    return sorted(bases)


def load_segments(directory: Path, config: LogConfig, *, recovery_point: int, clean: bool,
                  now_ms: int, on_batch: Callable[[BatchHeader], None],
                  names: list[str] | None = None) -> list[LogSegment]:
    """Open, check and (if needed) repair every segment of ``directory``, oldest first.

    ``on_batch`` sees every batch that was scanned in full (to rebuild the leader-epoch cache).
    Segments that were scanned, re-indexed or cut are marked ``dirty`` (the caller's flush makes
    them durable); trusted ones that passed their tail check are not, so a clean restart writes
    nothing.
    """
    bases = segment_bases(directory, remove_leftovers(directory, names))
    strict = not config.compact
    segments: list[LogSegment] = []
    started = time.monotonic()
    last_report = started
    for i, base in enumerate(bases):
        seg = LogSegment.open(directory, base, index_interval_bytes=config.index_interval_bytes,
                              max_index_bytes=config.segment_index_bytes, now_ms=now_ms)
        segments.append(seg)
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        trusted = clean or (next_base is not None and next_base <= recovery_point)
        problem: str | None = "index files missing or damaged"
        if trusted and seg.index_valid:
            result = seg.load_tail(check_crc=True)
            problem = result.problem
            if problem is None:
                if seg.index.pending or seg.time_index.pending:
                    seg.dirty = True  # its index files lacked entries (e.g. missing): write them
                continue
        if trusted or problem != "index files missing or damaged":
            log.info("%s: rebuilding the indexes of segment %d (%s)", directory.name, base,
                     problem)
        seg.reset_indexes()
        seg.dirty = True
        result = seg.scan(0, check_crc=True, strict=strict, on_batch=on_batch)
        if result.problem is not None:
            _truncate(directory, seg, result.valid_size, result.truncated_bytes, result.problem)
            for later in bases[i + 1:]:
                dropped = LogSegment.open(directory, later,
                                          index_interval_bytes=config.index_interval_bytes,
                                          max_index_bytes=config.segment_index_bytes,
                                          now_ms=now_ms)
                log.warning("%s: deleting segment %d (%d bytes) after the corrupt batch",
                            directory.name, later, dropped.size)
                dropped.delete()
            break
        now = time.monotonic()
        if now - last_report > _PROGRESS_SECONDS:
            last_report = now
            log.info("%s: recovered %d/%d segments", directory.name, i + 1, len(bases))
    return segments


def _truncate(directory: Path, seg: LogSegment, valid_size: int, dropped: int,
              problem: str) -> None:
    log.warning("%s: truncating segment %d at offset %d (byte %d): dropping %d bytes: %s",
                directory.name, seg.base_offset, seg.next_offset, valid_size, dropped, problem)
    seg.truncate_to_position(valid_size)
