"""All partition logs of one broker, across its log directories.

The broker needs one place that knows which partition lives in which ``log.dirs`` entry, recovers
them all at start-up (reporting progress, because a big broker takes a while), places new
partitions on the emptiest directory, and runs the periodic housekeeping: time-based rolls,
``flush.ms``, retention and compaction. The per-second checks (rolls, ``flush.ms``, producer-id
expiry) visit only the logs whose time has come (:meth:`LogManager.run_due_checks`, a
:class:`~strom.storage.due.DueQueue`), so an idle partition costs nothing per tick; retention
and compaction visit every log each ``log.retention.check.interval.ms`` (5 minutes), as Kafka's.
A partition directory is ``<topic>-<partition>`` (topics may contain '-', so the name is split
at the last one).

Opening and closing thousands of logs runs on ``recovery_threads`` threads per log directory,
as Kafka's ``num.recovery.threads.per.data.dir`` does. A clean close of a changed log writes
its index entries, checkpoints, producer snapshot and marker; ``close`` writes them all without
an fsync and makes them durable with one ``syncfs`` per directory before the markers go down
(one fsync per file took 22.5 s for 10,000 changed logs).

With ``defer``, ``load_all`` opens a cleanly shut down log by reading only its checkpoint (log
start, log end, high watermark: what a partition needs to lead); its segments are read on first
use or by :meth:`LogManager.load_deferred`, which the broker runs in short slices once it
serves. Logs that were not shut down cleanly are recovered at once, so a restart after kill -9
recovers only what lies past a recovery point (issue 21 item 5: 10,000 clean partitions took
7.8 s to open before the broker could serve).

Deleting a partition first renames its directory to ``<topic>-<partition>.<n>.deleting`` (which
``load_all`` never mistakes for a partition, and removes if a crash left it) and then removes it.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from strom.protocol.errors import ErrorCode, StromError
from strom.storage import dir_checkpoint, fileops
from strom.storage.config import LogConfig
from strom.storage.dir_checkpoint import DirCheckpoints
from strom.storage.due import DueQueue
from strom.storage.log import PartitionLog, wall_clock_ms
from strom.storage.producer_state import DEFAULT_EXPIRATION_MS

log = logging.getLogger(__name__)

_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_DELETING_SUFFIX = ".deleting"
_PROBE_FILE = ".write-probe"
_PROGRESS_SECONDS = 5.0
_T = TypeVar("_T")
_R = TypeVar("_R")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    match = _PARTITION_DIR.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


class LogManager:
    """Owns the ``PartitionLog`` of every partition replica on this broker."""

    def __init__(self, log_dirs: Sequence[Path], default_config: LogConfig, *,
                 clock: Callable[[], int] = wall_clock_ms,
                 producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS,
                 recovery_threads: int = 1) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is required (log.dirs)")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self._clock = clock
        self.producer_id_expiration_ms = producer_id_expiration_ms  # producer.id.expiration.ms
        self.recovery_threads = max(1, recovery_threads)
        """Threads per log directory for opening and closing logs."""
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._dir_counts: dict[Path, int] | None = None
        """Logs per directory for placing new ones (None: count again). Kept while logs are
        created: counting every log for each new one made creating N partitions O(N^2)."""
        self._deleted = 0
        self.offline_dirs: dict[Path, str] = {}
        """Log directories that failed I/O, with the reason; their logs take no writes."""
        self._unborn: deque[PartitionLog] = deque()
        """New logs whose first segment has no file yet (:meth:`create_segment_files`)."""
        self.on_unborn: Callable[[], None] | None = None
        """Told when a new log waits for its segment file (the broker then runs
        :meth:`create_segment_files` in the background)."""
        self.on_dir_offline: Callable[[Path, str], None] | None = None
        """Told once per directory that goes offline (the broker reports it to the controller,
        which moves the leadership of its replicas there)."""
        self._checks: DueQueue[PartitionLog] = DueQueue()
        """When each log's time-based check (:meth:`PartitionLog.maybe_roll`) is next due."""

    # ---- log directory failure (Kafka's LogDirFailureChannel) ----------------------------

    def io_error(self, plog: PartitionLog, exc: OSError) -> None:
        """A write in ``plog``'s directory failed: take the whole directory offline.

        Like Kafka, any I/O error (disk full, no file handle, EIO) fails the directory, not
        just the partition: the next write there would likely fail too, and a half-working
        disk is worse than an offline one. Its logs keep serving reads of what they hold."""
        directory = plog.log_dir
        if directory in self.offline_dirs:
            return
        reason = plog.offline or f"{exc}"
        self.offline_dirs[directory] = reason
        hit = [p for p in self._logs.values() if p.log_dir == directory]
        for other in hit:
            other.take_offline(reason)
        log.error("log directory %s is offline (%s, writing %s-%d): its %d partitions take no "
                  "more writes; fix the disk and restart the broker", directory, reason,
                  plog.topic, plog.partition, len(hit))
        if self.on_dir_offline is not None:
            self.on_dir_offline(directory, reason)

    def _probe(self, log_dir: Path) -> None:
        """Write, fsync and remove a small file: a directory that fails goes offline before
        its logs load. A clean open of a log writes nothing (issue 21 item 5), so without this
        a full or failing disk would only be found by the first produce; one probe per
        directory costs what one partition's checkpoint used to."""
        probe = log_dir / _PROBE_FILE
        try:
            fd = fileops.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                fileops.write(fd, b"strom\n")
                fileops.fsync(fd)
            finally:
                os.close(fd)
            probe.unlink()
        except OSError as exc:
            reason = f"{errno.errorcode.get(exc.errno or 0, 'EIO')}: {exc.strerror or exc}"
            self.offline_dirs[log_dir] = reason
            log.error("log directory %s is offline (%s, a test write at start failed): its "
                      "partitions take no writes; fix the disk and restart the broker",
                      log_dir, reason)

    def _adopt(self, plog: PartitionLog) -> PartitionLog:
        plog.on_io_error = self.io_error
        plog.on_check_due = self._schedule_check
        self._schedule_check(plog)
        directory = plog.log_dir
        if directory in self.offline_dirs:
            plog.take_offline(self.offline_dirs[directory])
        elif plog.offline is not None:  # it could not even be opened for writing
            self._logs[(plog.topic, plog.partition)] = plog
            self._dir_counts = None
            self.io_error(plog, OSError(plog.offline))
        return plog

    def load_all(self, topic_configs: Mapping[str, LogConfig] | None = None, *,
                 defer: bool = False) -> dict[tuple[str, int], PartitionLog]:
        """Open (and recover) every partition found in the log directories; ``defer``: leave
        the reading of cleanly shut down logs to their first use or :meth:`load_deferred`."""
        found: list[tuple[Path, str, int]] = []
        checkpoints: dict[Path, DirCheckpoints] = {}
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._probe(log_dir)
            checkpoints[log_dir] = DirCheckpoints.read(log_dir)
            with os.scandir(log_dir) as entries:  # the file type comes with the listing
                dirs = sorted(e.name for e in entries if e.is_dir())
            for name in dirs:
                path = log_dir / name
                if path.name.endswith(_DELETING_SUFFIX):
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                parsed = parse_partition_dir(path.name)
                if parsed is None:
                    if not (path.name.startswith("__raft") or path.name.endswith("-stray")):
                        log.warning("ignoring %s: not a <topic>-<partition> directory", path)
                    continue
                if parsed in self._logs:
                    continue
                found.append((path, *parsed))
        started = last_report = time.monotonic()
        self._dir_counts = None

        def open_one(item: tuple[Path, str, int]) -> PartitionLog:
            path, topic, partition = item
            config = (topic_configs or {}).get(topic, self.default_config)
            return PartitionLog.open(path, config, topic=topic, partition=partition,
                                     clock=self._clock,
                                     producer_id_expiration_ms=self.producer_id_expiration_ms,
                                     defer=defer, dirs=checkpoints[path.parent])

        for done, plog in enumerate(self._in_parallel(open_one, found), start=1):
            self._logs[(plog.topic, plog.partition)] = self._adopt(plog)
            now = time.monotonic()
            if now - last_report > _PROGRESS_SECONDS or done == len(found):
                last_report = now
                log.info("recovered %d/%d partitions (%.1fs)", done, len(found), now - started)
        deferred = sum(1 for plog in self._logs.values() if not plog.loaded)
        if deferred:
            log.info("%d cleanly shut down partition logs are read on first use or in the "
                     "background", deferred)
        return dict(self._logs)

    def deferred(self) -> list[PartitionLog]:
        """Logs whose segments have not been read yet (deferred opens)."""
        return [plog for plog in self._logs.values() if not plog.loaded]

    def load_deferred(self, budget_s: float, pending: list[PartitionLog]) -> None:
        """Finish deferred opens from the end of ``pending`` (taking them off it) for about
        ``budget_s`` seconds. A log that fails to load takes its directory offline, as any
        I/O error does."""
        deadline = time.monotonic() + budget_s
        while pending:
            plog = pending.pop()
            if plog.loaded or self._logs.get((plog.topic, plog.partition)) is not plog:
                continue
            try:
                plog.load()
            except StromError as err:  # the log told the manager (its directory is offline)
                log.error("%s", err.message)
            if time.monotonic() >= deadline:
                return

    def create(self, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        """Create (or return the existing) log, on the directory with the fewest partitions."""
        existing = self._logs.get((topic, partition))
        if existing is not None:
            existing.update_config(config)
            return existing
        counts = self._dir_counts
        if counts is None:
            counts = self._dir_counts = dict.fromkeys(self.log_dirs, 0)
            for plog in self._logs.values():
                parent = plog.log_dir
                if parent in counts:
                    counts[parent] += 1
        online = [d for d in self.log_dirs if d not in self.offline_dirs]
        if not online:
            failed = "; ".join(f"{d}: {r}" for d, r in self.offline_dirs.items())
            raise StromError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"cannot create {topic}-{partition}: every log directory is "
                             f"offline ({failed})")
        log_dir = min(online, key=lambda d: counts[d])
        try:
            plog = PartitionLog.open(log_dir / partition_dir_name(topic, partition), config,
                                     topic=topic, partition=partition, clock=self._clock,
                                     producer_id_expiration_ms=self.producer_id_expiration_ms)
        except OSError as exc:
            raise StromError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"cannot create {topic}-{partition} in {log_dir}: {exc}") from None
        self._logs[(topic, partition)] = plog
        counts[log_dir] += 1
        self._adopt(plog)
        self._unborn.append(plog)  # a no-op there unless its segment file is still unborn
        if self.on_unborn is not None:
            self.on_unborn()
        return plog

    def create_segment_files(self, budget_s: float) -> bool:
        """Create the files of new logs' first segments, oldest first, for about ``budget_s``
        seconds; True while some remain. A new partition is only a directory until then (a
        topic's creation stays fast, issue 21 item 2), and without this its first write would
        create the file: ~0.6 ms of CPU each here, 0.6 s inside the first Produce of a
        1,000-partition topic. A failure is left to that first write, which answers it."""
        deadline = time.monotonic() + budget_s
        pending = self._unborn
        while pending:
            plog = pending.popleft()
            if self._logs.get((plog.topic, plog.partition)) is not plog:
                continue
            try:
                plog.create_segment_file()
            except OSError as exc:
                log.debug("creating the segment file of %s-%d failed (%s); its first write "
                          "creates it", plog.topic, plog.partition, exc)
            if time.monotonic() >= deadline:
                break
        return bool(pending)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def partitions(self) -> dict[tuple[str, int], PartitionLog]:
        return dict(self._logs)

    def forget(self, topic: str, partition: int) -> None:
        """Close a log and stop managing it, leaving its files where they are."""
        plog = self._logs.pop((topic, partition), None)
        self._dir_counts = None
        if plog is not None:
            self._checks.discard(plog)
            plog.close()

    def delete_partition(self, topic: str, partition: int) -> None:
        plog = self._logs.pop((topic, partition), None)
        self._dir_counts = None
        if plog is None:
            raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"no log for {topic}-{partition} on this broker")
        self._checks.discard(plog)
        plog.close()
        self._deleted += 1
        doomed = plog.directory.with_name(
            f"{plog.directory.name}.{self._deleted}{_DELETING_SUFFIX}")
        plog.directory.rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    def _schedule_check(self, plog: PartitionLog) -> None:
        """(Re)schedule ``plog``'s next time-based check at its due time, if it has one."""
        due = plog.next_check_ms()
        if due is not None:
            self._checks.schedule(plog, due)

    @property
    def scheduled_checks(self) -> int:
        """Logs with a time-based check scheduled."""
        return len(self._checks)

    def run_due_checks(self, now_ms: int | None = None) -> int:
        """Time rolls, ``flush.ms`` and producer-id expiry of the logs whose check is due (call
        every second); returns how many logs were visited. An idle log is not visited until
        its next check (a roll after ``segment.ms``, the producer-id expiry every 10 minutes)
        comes due, or a write makes one due sooner."""
        now = self._clock() if now_ms is None else now_ms
        due = self._checks.pop_due(now)
        for plog in due:
            if self._logs.get((plog.topic, plog.partition)) is not plog:
                continue  # deleted or replaced meanwhile
            try:
                plog.maybe_roll(now)
            except OSError as exc:
                plog.take_offline(f"{exc}")
                self.io_error(plog, exc)
            except Exception:
                log.exception("roll/flush check of %s-%d failed", plog.topic, plog.partition)
            self._schedule_check(plog)
        return len(due)

    def run_maintenance(self, now_ms: int | None = None) -> None:
        """Time rolls, flush.ms, retention and compaction for every log; call periodically
        (every ``log.retention.check.interval.ms``)."""
        now = self._clock() if now_ms is None else now_ms
        for key, plog in list(self._logs.items()):
            try:
                plog.maybe_roll(now)
                plog.apply_retention(now)
                if plog.needs_compaction(now):
                    plog.compact(now)
            except OSError as exc:
                plog.take_offline(f"{exc}")
                self.io_error(plog, exc)
            except Exception:
                log.exception("maintenance of %s-%d failed", *key)
            self._schedule_check(plog)

    def close(self) -> None:
        """Close every log cleanly with one ``syncfs`` per log directory and step instead of
        ~7 fsyncs per changed log (a broker that had written to each of 10,000 partitions
        took 22.5 s to stop, issue 21 item 5; Kafka fsyncs per log but writes one checkpoint
        per directory). The steps keep a per-file close's order: the changed logs write their
        index entries, syncfs; their producer snapshots (only those with producer state) and
        each log directory's checkpoint files (as Kafka's ``recovery-point-offset-checkpoint``
        and friends, and Strom's file of every log's leader epochs: no new file per log),
        syncfs; their
        clean-shutdown markers, syncfs. A directory whose ``syncfs`` or checkpoint write fails
        gets no markers: its logs recover at the next start. Where ``syncfs`` cannot report
        errors (not Linux 5.8+), each log fsyncs its own files and writes its own checkpoint
        (an empty marker says so, :mod:`strom.storage.dir_checkpoint`)."""
        started = time.monotonic()
        logs = list(self._logs.values())
        handles = self._sync_handles(logs) if fileops.syncfs_available() else None
        try:
            self._close_logs(logs, handles)
        finally:
            for fd in (handles or {}).values():
                os.close(fd)
        self._logs.clear()
        self._checks = DueQueue()
        self._dir_counts = None
        if logs:
            log.info("closed %d partition logs in %.2fs", len(logs), time.monotonic() - started)

    def _sync_handles(self, logs: Sequence[PartitionLog]) -> dict[Path, int] | None:
        """A descriptor per log directory holding logs, opened before anything is written
        (``syncfs`` reports the write-back errors seen since its descriptor was opened);
        None if one cannot be opened (then each log fsyncs its own files)."""
        handles: dict[Path, int] = {}
        for directory in {plog.log_dir for plog in logs}:
            try:
                handles[directory] = fileops.open(directory, os.O_RDONLY)
            except OSError as exc:
                log.warning("cannot open %s to sync it (%s); closing its logs one fsync at a "
                            "time", directory, exc)
                for fd in handles.values():
                    os.close(fd)
                return None
        return handles

    def _close_logs(self, logs: Sequence[PartitionLog], handles: dict[Path, int] | None
                    ) -> None:
        sync = handles is None

        def close_one(plog: PartitionLog) -> bool:
            try:
                return plog.close(sync=sync)
            except Exception:
                log.exception("closing %s-%d failed", plog.topic, plog.partition)
                return False

        def checkpoint_one(plog: PartitionLog) -> bool:
            try:
                plog.write_close_checkpoints(own_checkpoint=False)
            except Exception:
                log.exception("closing %s-%d failed", plog.topic, plog.partition)
                return False
            return True

        pending = [plog for plog, more in zip(logs, self._in_parallel(close_one, logs),
                                              strict=True) if more]
        if handles is None:
            return
        synced = self._syncfs(handles)  # the data files
        pending = [plog for plog in pending if plog.log_dir in synced]
        pending = [plog for plog, ok in zip(pending, self._in_parallel(checkpoint_one, pending),
                                            strict=True) if ok]
        written = self._write_dir_checkpoints(logs, {p.log_dir for p in pending})
        # the markers' source holds text that must be durable before any marker links it
        sources = {d: dir_checkpoint.make_marker_source(d) for d in written}
        synced = self._syncfs(handles)  # the snapshots, checkpoints and markers' source
        pending = [plog for plog in pending
                   if plog.log_dir in synced and plog.log_dir in written]

        def mark_one(plog: PartitionLog) -> bool:
            try:
                plog.mark_clean(sync=False, link_from=sources[plog.log_dir],
                                text=dir_checkpoint.MARKER_TEXT)
            except OSError as exc:
                log.warning("%s-%d: cannot write its clean-shutdown marker (%s); it recovers "
                            "at the next start", plog.topic, plog.partition, exc)
                return False
            return True

        list(self._in_parallel(mark_one, pending))
        self._syncfs(handles)  # the markers: if they do not last, the next start recovers

    def _write_dir_checkpoints(self, logs: Sequence[PartitionLog], changed: set[Path]
                               ) -> set[Path]:
        """Write the checkpoint files of each log directory in ``changed`` (those with a log
        that changed) for all its logs that are not offline, without an fsync (the caller's
        ``syncfs`` follows); the directories written."""
        by_dir: dict[Path, list[PartitionLog]] = {d: [] for d in changed}
        for plog in logs:
            directory = plog.log_dir
            if directory in by_dir and plog.offline is None:
                by_dir[directory].append(plog)
        written: set[Path] = set()
        for directory, members in by_dir.items():
            if directory in self.offline_dirs:
                continue
            try:
                dir_checkpoint.write_dir(directory, (p.close_offsets() for p in members),
                                         sync=False)
            except OSError as exc:
                log.error("log directory %s: writing its checkpoint files failed (%s); its "
                          "changed logs get no clean-shutdown marker and recover at the next "
                          "start", directory, exc)
                continue
            written.add(directory)
        return written

    @staticmethod
    def _syncfs(handles: dict[Path, int]) -> set[Path]:
        """``syncfs`` each directory's file system; the directories it succeeded for."""
        done: set[Path] = set()
        for directory, fd in handles.items():
            try:
                fileops.syncfs(fd)
            except OSError as exc:
                log.error("log directory %s: making the closed logs durable failed (%s); "
                          "they get no clean-shutdown marker and recover at the next start",
                          directory, exc)
                continue
            done.add(directory)
        return done

    def _in_parallel(self, work: Callable[[_T], _R], items: Iterable[_T]) -> Iterator[_R]:
        """``work`` over ``items`` on ``recovery_threads`` threads per log directory, results
        in order; the first exception propagates (after the running ones finish)."""
        items = list(items)
        threads = min(len(items), self.recovery_threads * len(self.log_dirs))
        if threads <= 1:
            yield from map(work, items)
            return
        # in chunks: a deferred open costs less than handing one item to a thread
        size = max(1, min(64, len(items) // (threads * 4)))
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        with ThreadPoolExecutor(threads, thread_name_prefix="log-recovery") as pool:
            for results in pool.map(lambda chunk: [work(item) for item in chunk], chunks):
                yield from results

