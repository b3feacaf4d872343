"""DescribeCluster (key 60), versions 0-2: cluster id, active controller and brokers, through
the admin handler the gRPC front uses (:func:`strom.broker.admin.describe_cluster`), with every
broker's endpoint on *this* Kafka listener.

Supports fenced brokers (v2: listed with ``is_fenced`` when asked), endpoint type 1 (brokers).

Not supported: endpoint type 2 (controllers: Strom's controllers are brokers, reached over
gRPC: INVALID_REQUEST with the reason), authorized operations.
"""

from __future__ import annotations

from typing import Any

from strom.broker import admin
from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import admin_pb2

KEY = 60
VERSIONS = (0, 2)
BROKERS = 1


async def handle(ctx: Context) -> Any:
    body = ctx.body
    core = ctx.core
    endpoint_type = getattr(body, "endpoint_type", BROKERS)
    if endpoint_type != BROKERS:
        return ctx.build("DescribeClusterResponse", throttle_time=NO_THROTTLE,
                         error_code=code(int(ErrorCode.INVALID_REQUEST)),
                         error_message=f"endpoint_type={endpoint_type}: only brokers (1) are "
                                       f"described", endpoint_type=endpoint_type, cluster_id="",
                         controller_id=-1, brokers=())
    await admin.metadata_barrier(core)
    answer = await admin.describe_cluster(core, admin_pb2.DescribeClusterRequest())
    fenced = set(answer.fenced_broker_ids)
    include_fenced = bool(getattr(body, "include_fenced_brokers", False))
    brokers = tuple(
        ctx.build("DescribeClusterBroker", broker_id=b.broker_id, host=b.host, port=b.port,
                  rack=b.rack or None, is_fenced=b.fenced)
        for b in core.metadata.brokers(ctx.listener)
        if b.host and (not b.fenced or (include_fenced and b.broker_id in fenced)))
    return ctx.build("DescribeClusterResponse", throttle_time=NO_THROTTLE, error_code=code(0),
                     error_message=None, endpoint_type=BROKERS, cluster_id=answer.cluster_id,
                     controller_id=answer.controller_id, brokers=brokers)
