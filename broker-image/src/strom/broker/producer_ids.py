"""Producer ids for idempotent producers, and the InitProducerId handler.

Ids must be unique in the cluster, yet any broker answers InitProducerId. As in Kafka (KIP-730),
the controller hands each broker a block of ids through the metadata log (``AllocateProducerIds``)
and the broker serves ids from its block without further coordination. A block is never reused
across restarts (the broker does not know how much of it was handed out), so each start
allocates afresh: ids are cheap (int64).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from strom.controller.metadata import AllocateProducerIds, Command
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import broker_pb2

if TYPE_CHECKING:
    from strom.broker.core import BrokerCore

log = logging.getLogger(__name__)

class ProducerIdManager:
    """Serves producer ids from blocks the controller allocated to this broker."""

    def __init__(self, broker_id: int, propose: Callable[[Command], Awaitable[int]],
                 current_block: Callable[[], tuple[int, int] | None],
                 block_size: int = 1000) -> None:
        if block_size < 1:
            raise ValueError(f"block_size={block_size} must be >= 1")
        self.broker_id = broker_id
        self.block_size = block_size
        self._propose = propose
        self._current_block = current_block
        self._next = 0
        self._end = 0  # exclusive: no block yet
        self._block: tuple[int, int] | None = None
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        """A producer id no other caller anywhere in the cluster gets.

        Concurrent callers that find the block used up wait for one shared allocation.
        """
        while True:
            if self._next < self._end:
                pid = self._next
                self._next += 1
                return pid
            async with self._lock:
                if self._next >= self._end:
                    await self._allocate()

    async def _allocate(self) -> None:
        previous = self._block
        await self._propose(AllocateProducerIds(self.broker_id, self.block_size))
        block = self._current_block()
        if block is None or block == previous or block[1] < 1:
            raise StromError(
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                f"broker {self.broker_id} proposed a producer id block but does not see a new "
                f"one in its metadata image (got {block}); retry InitProducerId")
        self._block = block
        self._next, self._end = block[0], block[0] + block[1]
        log.info("broker %d got producer ids %d..%d", self.broker_id, self._next, self._end - 1)


async def handle_init_producer_id(core: BrokerCore, request: broker_pb2.InitProducerIdRequest
                                  ) -> broker_pb2.InitProducerIdResponse:
    """Every (non-transactional) InitProducerId gets a newly allocated id at epoch 0."""
    return await init_producer_id(core.producer_ids, request)


async def init_producer_id(ids: ProducerIdManager, request: broker_pb2.InitProducerIdRequest
                           ) -> broker_pb2.InitProducerIdResponse:
    """Kafka's TransactionCoordinator.handleInitProducerId for a null transactional id: always
    a new id from the id manager at epoch 0, whatever ``producer_id``/``producer_epoch`` say.

    Those two fields only mean something for a transactional id (KIP-360: the coordinator checks
    them against the id it stored for that transactional id). Without one there is nothing to
    check them against, so honouring them would let any client adopt an id that was never
    allocated, or bump another producer's epoch and fence it. An idempotent producer bumps its
    epoch locally instead (as Kafka's client does), and asks for a new id only when its epoch
    is exhausted.
    """
    if request.transactional_id:
        raise StromError(ErrorCode.INVALID_REQUEST,
                         f"transactional_id={request.transactional_id!r}: transactions are not "
                         f"supported yet; leave transactional_id empty for an idempotent producer")
    return broker_pb2.InitProducerIdResponse(producer_id=await ids.next_id(), producer_epoch=0)
