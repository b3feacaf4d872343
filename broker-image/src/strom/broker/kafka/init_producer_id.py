"""InitProducerId (key 22), versions 0-5: producer ids for idempotent producers, through the
core's :func:`strom.broker.producer_ids.init_producer_id` (the gRPC front's call).

Supports a new idempotent producer (id -1: a fresh id, epoch 0) and KIP-360's epoch bump of an
existing one (v3+). Errors are Kafka's codes in ``error_code``.

Not supported: transactional ids (transactions: INVALID_REQUEST with the reason), the two-phase
commit fields of v6 (not advertised).
"""

from __future__ import annotations

from typing import Any

from strom.broker.kafka.context import NO_THROTTLE, Context, code
from strom.broker.producer_ids import init_producer_id
from strom.protocol.errors import StromError
from strom.protocol.v1 import broker_pb2

KEY = 22
VERSIONS = (0, 5)


async def handle(ctx: Context) -> Any:
    body = ctx.body
    request = broker_pb2.InitProducerIdRequest(
        transactional_id=body.transactional_id or "",
        producer_id=getattr(body, "producer_id", -1),
        producer_epoch=getattr(body, "producer_epoch", -1))
    try:
        answer = await init_producer_id(ctx.core.producer_ids, request)
    except StromError as err:
        return ctx.build("InitProducerIdResponse", throttle_time=NO_THROTTLE,
                         error_code=code(int(err.code)), producer_id=-1, producer_epoch=-1)
    return ctx.build("InitProducerIdResponse", throttle_time=NO_THROTTLE, error_code=code(0),
                     producer_id=answer.producer_id, producer_epoch=answer.producer_epoch)
