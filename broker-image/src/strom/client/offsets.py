"""ListOffsets, routed to partition leaders with metadata refresh and retry.

Used by the consumer (offset resets, ``beginning_offsets``/``end_offsets``/``offsets_for_times``)
and by ``Admin.list_offsets``. Timestamps follow the wire contract: -1 latest, -2 earliest,
-3 the record with the largest timestamp, >= 0 the first offset whose timestamp is >= it.
"""

from __future__ import annotations

import asyncio
import time

import grpc

from strom.client.backoff import RetryPolicy
from strom.client.connections import Connections, rpc_error
from strom.client.models import TopicPartition
from strom.protocol.errors import ErrorCode, StromError, error_code_from_int
from strom.protocol.v1 import broker_pb2

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3


def parse_offset_spec(spec: str | int) -> int:
    """``"earliest"`` / ``"latest"`` / ``"max_timestamp"`` / a timestamp in ms -> wire value."""
    if isinstance(spec, str):
        names = {"earliest": EARLIEST_TIMESTAMP, "beginning": EARLIEST_TIMESTAMP,
                 "latest": LATEST_TIMESTAMP, "end": LATEST_TIMESTAMP,
                 "max_timestamp": MAX_TIMESTAMP}
        if spec.lower() not in names:
            raise StromError(ErrorCode.INVALID_REQUEST,
                             f"offset spec {spec!r} is not valid; use 'earliest', 'latest', "
                             f"'max_timestamp' or a timestamp in ms")
        return names[spec.lower()]
    if spec < MAX_TIMESTAMP:
        raise StromError(ErrorCode.INVALID_TIMESTAMP, f"timestamp {spec} is not valid")
    return int(spec)


async def list_offsets(conns: Connections, retry: RetryPolicy,
                       wanted: dict[TopicPartition, int], timeout_s: float
                       ) -> dict[TopicPartition, tuple[int, int]]:
    """{tp: wire timestamp} -> {tp: (offset, timestamp)}; retries retriable errors until timeout."""
    deadline = time.monotonic() + timeout_s
    conns.add_topics(tp.topic for tp in wanted)
    remaining = dict(wanted)
    result: dict[TopicPartition, tuple[int, int]] = {}
    attempt = 0
    last: StromError | None = None
    while remaining:
        routed, unknown = conns.metadata.group_by_leader(remaining)
        if unknown or conns.metadata.needs_refresh(time.monotonic() * 1000):
            try:
                await conns.refresh_metadata()
            except StromError as exc:
                last = exc
            routed, unknown = conns.metadata.group_by_leader(remaining)
            for tp in unknown:
                # fresh metadata says the topic is missing or broken: fail now, as Kafka's
                # admin does, rather than retrying a lookup that cannot succeed
                err = conns.metadata.topic_error(tp.topic)
                if err is not None and last is None:
                    raise err
                if conns.metadata.partition_count(tp.topic) is not None and \
                        tp.partition >= (conns.metadata.partition_count(tp.topic) or 0):
                    raise StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"{tp} does not exist: {tp.topic!r} has "
                                     f"{conns.metadata.partition_count(tp.topic)} partitions")
        calls = [_ask(conns, node, {tp: remaining[tp] for tp in tps}, timeout_s)
                 for node, tps in routed.items()]
        for answer in await asyncio.gather(*calls):
            for tp, value in answer.items():
                if isinstance(value, StromError):
                    if not value.retriable:
                        raise value
                    last = value
                    conns.metadata.mark_stale()
                else:
                    result[tp] = value
                    remaining.pop(tp, None)
        if not remaining:
            break
        attempt += 1
        left = deadline - time.monotonic()
        if left <= 0:
            raise last or StromError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"no leader found for {sorted(map(str, remaining))} within {timeout_s:.1f} s")
        conns.metadata.mark_stale()
        await asyncio.sleep(min(left, retry.backoff(attempt) / 1000.0))
    return result


async def _ask(conns: Connections, node: int, wanted: dict[TopicPartition, int],
               timeout_s: float) -> dict[TopicPartition, tuple[int, int] | StromError]:
    request = broker_pb2.ListOffsetsRequest(partitions=[
        broker_pb2.ListOffsetsPartition(topic=tp.topic, partition=tp.partition, timestamp=ts)
        for tp, ts in wanted.items()])
    try:
        response = await conns.broker_stub(node).ListOffsets(request, timeout=timeout_s)
    except grpc.RpcError as exc:
        err = rpc_error(exc)
        return dict.fromkeys(wanted, err)
    except StromError as err:
        return dict.fromkeys(wanted, err)
    out: dict[TopicPartition, tuple[int, int] | StromError] = {}
    for p in response.partitions:
        tp = TopicPartition(p.topic, p.partition)
        if p.error_code:
            out[tp] = StromError(error_code_from_int(p.error_code),
                                 p.error_message or f"ListOffsets for {tp} failed")
        else:
            out[tp] = (p.offset, p.timestamp)
    for tp in wanted:
        out.setdefault(tp, StromError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                      f"ListOffsets answer has no result for {tp}"))
    return out
