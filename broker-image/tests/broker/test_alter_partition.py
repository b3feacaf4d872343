"""ISR changes go to the controller in batches, one proposal in flight (Kafka's
AlterPartitionManager): a broker rejoining the ISR of thousands of partitions after a restart
used to make one metadata proposal per partition."""

from __future__ import annotations

import asyncio

import pytest

from strom.broker.alter_partition import MAX_BATCH, AlterPartitionManager
from strom.controller.metadata import (
    Command,
    CreateTopic,
    Endpoint,
    MetadataError,
    MetadataImage,
    PartitionState,
    RegisterBroker,
    UnfenceBroker,
)
from strom.protocol.errors import ErrorCode, StromError

N = 1200


class Controller:
    """Applies proposals to an image after a short round trip, as the metadata log would."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.proposed: list[Command] = []
        commands: list[Command] = []
        for b in range(3):
            commands += [RegisterBroker(b, f"inc-{b}", (Endpoint("PLAINTEXT", "h", 9092 + b),)),
                         UnfenceBroker(b, f"inc-{b}")]
        commands.append(CreateTopic("t", "tid", tuple((0, 1, 2) for _ in range(N))))
        for offset, c in enumerate(commands, start=1):
            self.image.apply(offset, c)

    async def propose(self, command: Command) -> int:
        self.proposed.append(command)
        await asyncio.sleep(0.01)
        offset = self.image.offset + 1
        try:
            self.image.apply(offset, command)
        except MetadataError as exc:
            raise StromError(exc.code, exc.message) from None
        return offset

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        t = self.image.topics.get(topic)
        return t.partitions.get(partition) if t is not None else None


async def test_concurrent_isr_changes_share_few_proposals() -> None:
    controller = Controller()
    manager = AlterPartitionManager(controller.propose, controller.partition)
    try:
        first = asyncio.ensure_future(manager.alter_isr("t", 0, (0, 1), 0))
        await asyncio.sleep(0)  # in flight alone; the rest queue behind it
        rest = [manager.alter_isr("t", p, (0, 1), 0) for p in range(1, N)]
        rest.append(manager.alter_isr("t", 5, (0,), 0))  # stale: t-5 changes before it
        results = await asyncio.gather(first, *rest, return_exceptions=True)
        assert len(controller.proposed) == 1 + -(-N // MAX_BATCH)
        assert all(r is None for r in results[:-1]), [r for r in results if r is not None][:3]
        stale = results[-1]
        assert isinstance(stale, StromError) and stale.code is ErrorCode.INVALID_UPDATE_VERSION
        assert all(controller.image.partition("t", p).isr == [0, 1] for p in range(N))
    finally:
        await manager.stop()


async def test_a_single_change_is_proposed_alone_and_its_error_raised() -> None:
    controller = Controller()
    manager = AlterPartitionManager(controller.propose, controller.partition)
    try:
        await manager.alter_isr("t", 0, (0, 2), 0)
        with pytest.raises(StromError) as info:
            await manager.alter_isr("t", 0, (0,), 0)  # the epoch moved to 1
        assert info.value.code is ErrorCode.INVALID_UPDATE_VERSION
        assert controller.image.partition("t", 0).isr == [0, 2]
        assert [type(c).__name__ for c in controller.proposed] == ["ChangePartition"] * 2
    finally:
        await manager.stop()
