"""ProducerIdManager and InitProducerId over a real MetadataImage (the controller's state)."""

from __future__ import annotations

import asyncio

import pytest

from strom.broker.producer_ids import ProducerIdManager, init_producer_id
from strom.controller.metadata import AllocateProducerIds, Command, MetadataImage
from strom.protocol.errors import ErrorCode, StromError
from strom.protocol.v1 import broker_pb2


class FakeController:
    """Applies proposals to a shared image after a yield, as a committed entry would be."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.proposals = 0

    def manager(self, broker_id: int, block_size: int) -> ProducerIdManager:
        async def propose(command: Command) -> int:
            assert isinstance(command, AllocateProducerIds)
            self.proposals += 1
            await asyncio.sleep(0.01)
            self.image.offset += 1
            self.image.apply(self.image.offset, command)
            return self.image.offset

        return ProducerIdManager(broker_id, propose,
                                 lambda: self.image.producer_id_blocks.get(broker_id),
                                 block_size=block_size)


async def test_ids_are_unique_across_brokers_and_blocks() -> None:
    ctl = FakeController()
    a, b = ctl.manager(1, 3), ctl.manager(2, 3)
    ids = [await a.next_id() for _ in range(7)] + [await b.next_id() for _ in range(4)]
    assert len(set(ids)) == 11
    assert ctl.proposals == 3 + 2


async def test_concurrent_callers_share_one_allocation() -> None:
    ctl = FakeController()
    m = ctl.manager(1, 100)
    ids = await asyncio.gather(*(m.next_id() for _ in range(50)))
    assert sorted(ids) == list(range(50))
    assert ctl.proposals == 1


async def test_allocation_that_does_not_show_up_fails_retriably() -> None:
    async def propose(command: Command) -> int:
        return 1

    m = ProducerIdManager(1, propose, lambda: None)
    with pytest.raises(StromError) as info:
        await m.next_id()
    assert info.value.retriable


async def test_init_producer_id_always_allocates_a_new_id() -> None:
    m = FakeController().manager(1, 10)
    new = await init_producer_id(m, broker_pb2.InitProducerIdRequest(producer_id=-1,
                                                                      producer_epoch=-1))
    assert (new.producer_id, new.producer_epoch) == (0, 0)
    # Kafka, for a null transactional id: "always blindly accept the request and return a new
    # producerId". An id/epoch the request names is never adopted nor bumped (issue 13 item 7).
    for pid, epoch in ((123456789, 3), (0, 4), (0, 32766), (3, -1)):
        got = await init_producer_id(m, broker_pb2.InitProducerIdRequest(producer_id=pid,
                                                                         producer_epoch=epoch))
        assert got.producer_epoch == 0 and got.producer_id not in (pid, 123456789)
    with pytest.raises(StromError) as info:
        await init_producer_id(m, broker_pb2.InitProducerIdRequest(
            transactional_id="tx", producer_id=-1, producer_epoch=-1))
    assert info.value.code is ErrorCode.INVALID_REQUEST
