"""DescribeLogDirs (key 35), versions 1-5: this broker's log directories and the replicas in
them, through the core function the gRPC front uses (:func:`strom.broker.log_dirs.describe`).

Supports all replicas (``topics`` null) or the named partitions, sizes, offset lag, offline
directories (KAFKA_STORAGE_ERROR), total and usable bytes (v4), ``is_cordoned`` (v5, KIP-1066:
always false: Strom has no cordoned log directories, every online directory takes new replicas).

Not as Kafka: no future replicas (``is_future_key`` false: Strom does not move replicas between
one broker's directories); v0 (Kafka 4 does not advertise it either).
"""

from __future__ import annotations

from typing import Any

from strom.broker import log_dirs
from strom.broker.kafka.context import NO_THROTTLE, Context, code

KEY = 35
VERSIONS = (1, 5)


async def handle(ctx: Context) -> Any:
    topics = ctx.body.topics
    wanted = (None if topics is None
              else [(t.topic, p) for t in topics for p in t.partitions])
    answer = log_dirs.describe(ctx.core, wanted)
    results = []
    for d in answer.dirs:
        by_topic: dict[str, list[Any]] = {}
        for r in d.replicas:
            by_topic.setdefault(r.topic, []).append(ctx.build(
                "DescribeLogDirsPartition", partition_index=r.partition,
                partition_size=r.size_bytes, offset_lag=r.offset_lag, is_future_key=False))
        results.append(ctx.build(
            "DescribeLogDirsResult", error_code=code(d.error_code), log_dir=d.path,
            topics=tuple(ctx.build("DescribeLogDirsTopic", name=name, partitions=tuple(parts))
                         for name, parts in by_topic.items()),
            total_bytes=d.total_bytes, usable_bytes=d.usable_bytes, is_cordoned=False))
    return ctx.build("DescribeLogDirsResponse", throttle_time=NO_THROTTLE, error_code=code(0),
                     results=tuple(results))
