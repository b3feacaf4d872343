"""Refused ISR changes are logged one line per kind and reason per interval, not one per
partition: a broker restarted beside 10,000 partitions had 2,192 expansions refused with
INVALID_UPDATE_VERSION (each retried and then applied) and wrote a WARNING for every one. The
retries themselves are unchanged: once the controller accepts, every ISR expands."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from strom.protocol.errors import ErrorCode, StromError
from strom.ratelimit import RateLimitedLog
from strom.replication import manager as manager_module
from strom.replication.state import PartitionView

from .harness import Cluster, wait_until

PARTITIONS = 20


async def test_refused_expansions_log_once_and_are_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(manager_module, "_isr_failures", RateLimitedLog(manager_module.log))
    cluster = Cluster(tmp_path, (0, 1))
    accept = cluster.alter_isr_for(0)
    refused = 0

    async def alter_isr(topic: str, partition: int, isr: tuple[int, ...],
                        expected_epoch: int) -> None:
        nonlocal refused
        if refused < 3 * PARTITIONS:
            refused += 1
            raise StromError(ErrorCode.INVALID_UPDATE_VERSION, "partition epoch changed")
        await accept(topic, partition, isr, expected_epoch)

    monkeypatch.setattr(cluster, "alter_isr_for", lambda broker_id: alter_isr)
    caplog.set_level(logging.WARNING, logger=manager_module.log.name)
    try:
        await cluster.start(0)
        await cluster.start(1)
        for p in range(PARTITIONS):  # broker 1 out of the ISR, as after a restart
            cluster.set_view(PartitionView("t", p, 0, 0, 0, (0, 1), (0,)))
        await wait_until(lambda: all(cluster.view("t", p).isr == (0, 1)
                                     for p in range(PARTITIONS)),
                         what="every ISR expanded once the controller accepts")
        assert refused == 3 * PARTITIONS
        lines = [r.getMessage() for r in caplog.records if "ISR expand" in r.getMessage()]
        assert len(lines) == 1, lines
        assert "failed (" in lines[0] and "will retry" in lines[0]
    finally:
        await cluster.close()
