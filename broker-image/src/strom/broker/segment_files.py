"""The background task that creates new partitions' segment files ahead of their first writes.

A new partition is only a directory when its topic's creation is answered (creating a file
costs ~0.3-0.6 ms of CPU on this machine's ext4, most of it in the kernel); the log manager
creates the files afterwards in short slices (:meth:`LogManager.create_segment_files`) so a
first Produce to a fresh 1,000-partition topic does not create 1,000 files. The slices wait
while the metadata publisher has partitions left to publish: a creation is answered once its
partitions are published, and the slices took a third of the event loop between the
publisher's when 10,000 partitions were created in one request (issue 21 item 2). The files
are wanted before the partitions' first writes, not before the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

SLICE_S = 0.01
"""Longest stretch of creating segment files between two yields to the event loop."""
PAUSE_S = 0.01
"""Pause between two slices: at most half the loop's time."""


async def create_ahead(wanted: asyncio.Event, create: Callable[[float], bool],
                       publishing: Callable[[], bool], *, slice_s: float = SLICE_S,
                       pause_s: float = PAUSE_S) -> None:
    """Forever: once ``wanted`` is set, call ``create(slice_s)`` (True while files remain)
    every ``pause_s`` until it returns False, skipping the turns where ``publishing()``."""
    while True:
        await wanted.wait()
        wanted.clear()
        while True:
            await asyncio.sleep(pause_s)
            if publishing():
                continue
            if not create(slice_s):
                break
