"""``strom offsets`` against a real broker: earliest, latest, by time; unknown topics."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

pytestmark = pytest.mark.integration


def offsets(strom: Any, broker: Any, *args: str) -> dict[int, int]:
    r = strom("offsets", "events", "-o", "json", "--bootstrap-server", broker.bootstrap, *args)
    assert r.returncode == 0, r.stderr
    return {row["partition"]: row["offset"] for row in json.loads(r.stdout)}


def test_offsets_earliest_latest_and_by_time(strom: Any, broker: Any) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    assert strom("topic", "create", "events", "--partitions", "2", *bs).returncode == 0
    assert offsets(strom, broker) == {0: 0, 1: 0}

    r = strom("produce", "events", "--partition", "1", *bs, input="a\nb\nc\n")
    assert r.returncode == 0, r.stderr
    assert offsets(strom, broker, "--time", "latest") == {0: 0, 1: 3}
    assert offsets(strom, broker, "--time", "earliest") == {0: 0, 1: 0}
    assert offsets(strom, broker, "--time", "earliest", "--partition", "1") == {1: 0}

    # by time: from 1970 every record qualifies; from the future none does (-1, as in Kafka)
    assert offsets(strom, broker, "--time", "1970-01-01T00:00:00Z")[1] == 0
    future_ms = str(int(time.time() * 1000) + 3_600_000)
    assert offsets(strom, broker, "--time", future_ms)[1] == -1

    r = strom("offsets", "events", *bs)  # the table
    assert r.returncode == 0
    assert r.stdout.splitlines()[0].split() == ["TOPIC", "PARTITION", "OFFSET"]


def test_unknown_partition_is_exit_1(strom: Any, broker: Any) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    assert strom("topic", "create", "events", "--partitions", "2", *bs).returncode == 0
    r = strom("offsets", "events", "--partition", "7", *bs)
    assert r.returncode == 1
    assert r.stderr.strip() == "strom: error: --partition 7: topic events has partitions 0..1"
