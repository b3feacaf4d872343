"""Taking the leadership of many partitions logs one line, not one per partition.

Issue 21: a restart of a broker with 10,000 partitions logged 10,000 "leader in epoch" lines
at INFO while it published before being unfenced (0.15 s of CPU here). As Kafka's
``ReplicaManager.applyDelta`` ("Transitioning N partition(s) to local leaders", the partitions
at TRACE), the per-partition line is DEBUG and the publisher logs how many it took.
"""

from __future__ import annotations

import logging

import pytest

from strom.broker.core import BrokerCore


async def test_leading_many_partitions_is_one_info_line(
        core: BrokerCore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    await core.topics.create_topic("t", 50)
    infos = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert not [m for m in infos if "leader in epoch" in m], infos[:3]
    assert [m for m in infos if m.startswith("leading 50 partitions in a new epoch (t-0 in "
                                             "epoch ")], infos
