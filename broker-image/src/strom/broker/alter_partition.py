"""ISR changes of the partitions this broker leads, sent to the controller in batches (Kafka's
``AlterPartitionManager``).

Why: each ISR change is a metadata-log entry. A broker that comes back after a restart rejoins
the ISR of every partition it hosts, one change per partition as each catches up: with 10,000
partitions that was 10,000 proposals (a controller round trip, a Raft entry, an apply and a
publish on every broker each). As in Kafka, at most one proposal is in flight per broker; the
changes asked for meanwhile wait and go together, as one ``Batch`` of at most ``MAX_BATCH``.

A ``Batch`` applies each change on its own (a stale one is rejected, the others apply), so once
it is applied each caller learns its own outcome from the image: the partition's ISR is the one
asked for, or the change was rejected (INVALID_UPDATE_VERSION: the partition changed meanwhile,
or a replica it adds is fenced; the leader tries again from its new view).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from strom.controller.metadata import Batch, ChangePartition, Command, PartitionState
from strom.protocol.errors import ErrorCode, StromError
from strom.shutdown import cancel_and_wait

MAX_BATCH = 500
"""Changes per proposal (the controller's own bound on a ``Batch`` entry)."""

Propose = Callable[[Command], Awaitable[int]]
Lookup = Callable[[str, int], PartitionState | None]


class AlterPartitionManager:
    def __init__(self, propose: Propose, partition: Lookup) -> None:
        self._propose = propose
        self._partition = partition
        self._queue: list[tuple[ChangePartition, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self.proposals = 0
        """Proposals sent so far (each carries one change or a Batch)."""

    async def alter_isr(self, topic: str, partition: int, isr: tuple[int, ...],
                        expected_epoch: int) -> None:
        """Change the partition's ISR if its epoch is still ``expected_epoch``; returns once
        applied here, raises why not."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((ChangePartition(topic, partition, isr=isr,
                                            expected_partition_epoch=expected_epoch), future))
        if self._task is None:
            self._task = asyncio.create_task(self._drain(), name="alter-partition")
        await future

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait([task])
        for _, future in self._queue:
            if not future.done():
                future.set_exception(StromError(ErrorCode.BROKER_NOT_AVAILABLE,
                                                "the broker is shutting down"))
        self._queue.clear()

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                await self._send(batch)
        finally:
            self._task = None

    async def _send(self, batch: list[tuple[ChangePartition, asyncio.Future[None]]]) -> None:
        commands = [change for change, _ in batch]
        self.proposals += 1
        try:
            await self._propose(commands[0] if len(commands) == 1 else Batch(tuple(commands)))
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for change, future in batch:
            if future.done():
                continue
            p = self._partition(change.topic, change.partition)
            if p is None:
                future.set_exception(StromError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"{change.topic}-{change.partition} no longer exists"))
            elif change.isr is not None and tuple(p.isr) != change.isr:
                future.set_exception(StromError(
                    ErrorCode.INVALID_UPDATE_VERSION,
                    f"the controller did not apply ISR {list(change.isr)} to "
                    f"{change.topic}-{change.partition} (asked at partition epoch "
                    f"{change.expected_partition_epoch}; now epoch {p.partition_epoch}, ISR "
                    f"{p.isr}: it changed meanwhile, or a new member is fenced)"))
            else:
                future.set_result(None)
