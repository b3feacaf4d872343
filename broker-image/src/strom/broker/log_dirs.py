"""DescribeLogDirs: this broker's log directories, the replicas in each and their sizes (Kafka's
DescribeLogDirs, what ``kafka-log-dirs`` and Kafka UIs' broker pages show).

Every broker answers for itself (a client asks each broker, as with Kafka). An offline
directory (an I/O error took it out, JBOD) answers KAFKA_STORAGE_ERROR and no replicas; sizes
are the replica's segment bytes; the offset lag is how far a replica's log end is behind its
high watermark (0 for a leader), as Kafka reports for current (not future) replicas.

Not as Kafka: no future replicas (Strom does not move replicas between directories of one
broker: ``is_future_key`` is always false).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from strom.broker.core import BrokerCore
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import broker_pb2

TopicPartition = tuple[str, int]


def _usage(directory: Path) -> tuple[int, int]:
    try:
        usage = shutil.disk_usage(directory)
    except OSError:
        return -1, -1
    return usage.total, usage.free


def describe(core: BrokerCore, wanted: Iterable[TopicPartition] | None
             ) -> broker_pb2.DescribeLogDirsResponse:
    """Every log directory; replicas in ``wanted`` only (None: all of them)."""
    want = None if wanted is None else set(wanted)
    by_dir: dict[Path, list[broker_pb2.LogDirReplica]] = {d: [] for d in core.logs.log_dirs}
    for (topic, partition), plog in sorted(core.logs.partitions().items()):
        if want is not None and (topic, partition) not in want:
            continue
        replicas = by_dir.setdefault(plog.directory.parent, [])
        replicas.append(broker_pb2.LogDirReplica(
            topic=topic, partition=partition, size_bytes=plog.size_bytes,
            offset_lag=max(plog.high_watermark - plog.log_end_offset, 0)))
    response = broker_pb2.DescribeLogDirsResponse()
    for directory, replicas in by_dir.items():
        out = response.dirs.add(path=str(directory))
        reason = core.logs.offline_dirs.get(directory)
        if reason is not None:
            out.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
            out.error_message = f"log directory {directory} is offline: {reason}"
            out.total_bytes = out.usable_bytes = -1
            continue
        out.replicas.extend(replicas)
        out.total_bytes, out.usable_bytes = _usage(directory)
    return response


async def handle(core: BrokerCore, request: broker_pb2.DescribeLogDirsRequest
                 ) -> broker_pb2.DescribeLogDirsResponse:
    wanted = None if request.all_partitions else [(tp.topic, tp.partition)
                                                  for tp in request.partitions]
    return describe(core, wanted)
