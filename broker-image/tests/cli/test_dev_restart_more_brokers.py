"""Issue 12 item 1, as reported: a one-broker dev data dir started again with more brokers.

Before: the restart changed the controller voters (two quorums could elect two leaders over the
same metadata log; broker 0 then stayed fenced) and ``__consumer_offsets`` stayed at RF 1 under
the cluster's min.insync.replicas=2, so a new group rebalanced forever. Now the voters recorded
in the data dir are kept, ``__consumer_offsets`` is raised to RF 3 by a reassignment, and a new
group consumes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _env(state: dict[str, Any]) -> dict[str, str]:
    return {"STROM_BOOTSTRAP_SERVERS": ",".join(
        f"{b['host']}:{b['port']}" for b in state["brokers"])}


def test_restart_with_more_brokers_keeps_voters_and_raises_offsets_rf(
        strom: Any, data_dir: Path) -> None:
    up = ("dev", "up", "--data-dir", str(data_dir), "--base-port", "0", "-o", "json",
          "--timeout", "90")
    r = strom(*up)
    assert r.returncode == 0, r.stderr
    env = _env(json.loads(r.stdout))
    assert strom("topic", "create", "t", env=env).returncode == 0
    assert strom("produce", "t", input="one\n", env=env).returncode == 0
    r = strom("consume", "t", "--group", "g", "--from-beginning", "--max-messages", "1",
              env=env, timeout=60)
    assert r.returncode == 0 and r.stdout == "one\n", r.stderr
    assert strom("dev", "down", "--data-dir", str(data_dir)).returncode == 0

    r = strom(*up, "--brokers", "3")
    assert r.returncode == 0, r.stderr
    state = json.loads(r.stdout)
    assert state["voters"] == [0], "a restart must not change the controller quorum"
    assert "raising __consumer_offsets from replication factor 1 to 3" in r.stderr
    env = _env(state)
    r = strom("topic", "describe", "__consumer_offsets", "-o", "json", env=env)
    assert r.returncode == 0, r.stderr
    assert all(len(p["replicas"]) == 3 for p in json.loads(r.stdout)[0]["partitions"])

    assert strom("topic", "create", "T", env=env).returncode == 0
    assert strom("produce", "T", "--acks", "all", input="two\n", env=env).returncode == 0
    r = strom("consume", "T", "--group", "g5", "--from-beginning", "--max-messages", "1",
              env=env, timeout=90)
    assert r.returncode == 0 and r.stdout == "two\n", r.stderr
    r = strom("cluster", "describe", "-o", "json", env=env)
    health = json.loads(r.stdout)["partitions"]
    assert health["under_min_isr_partitions"] == ["t-0"], health  # the user's RF-1 topic

    r = strom(*up, "--brokers", "3")  # already running: reported, nothing changes
    assert r.returncode == 0, r.stderr
    assert strom("dev", "down", "--data-dir", str(data_dir)).returncode == 0
    r = strom(*up, "--brokers", "2")
    assert r.returncode == 2
    assert "holds a 3-broker cluster" in r.stderr and "--brokers 3 or more" in r.stderr
