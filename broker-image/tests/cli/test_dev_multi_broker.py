"""``strom dev up --brokers 3`` and the clustering commands on it, with real broker processes:
cluster describe, reassign plan / execute / status --watch, leader elect, dev status / down."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from strom.cli.localcluster import pid_alive

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_three_broker_dev_cluster_and_a_reassignment(strom: Any, data_dir: Path,
                                                     tmp_path: Path) -> None:
    r = strom("dev", "up", "--brokers", "3", "--data-dir", str(data_dir), "--base-port", "0",
              "-o", "json", "--timeout", "90")
    assert r.returncode == 0, r.stderr
    assert "3 brokers registered" in r.stderr or "all 3 brokers registered" in r.stderr
    state = json.loads(r.stdout)
    assert len(state["brokers"]) == 3 and state["voters"] == [0, 1, 2]
    pids = [b["pid"] for b in state["brokers"]]
    assert all(pid_alive(p) for p in pids)
    env = {"STROM_BOOTSTRAP_SERVERS": ",".join(
        f"{b['host']}:{b['port']}" for b in state["brokers"])}

    r = strom("cluster", "describe", "-o", "json", env=env)
    assert r.returncode == 0, r.stderr
    desc = json.loads(r.stdout)
    assert [b["id"] for b in desc["brokers"]] == [0, 1, 2]
    assert all(b["state"] == "alive" and b["voter"] for b in desc["brokers"])
    assert desc["controller_id"] in (0, 1, 2) and desc["voters"] == [0, 1, 2]
    r = strom("cluster", "describe", env=env)
    assert r.returncode == 0 and "UnderReplicated" in r.stdout, r.stderr

    r = strom("topic", "create", "moving", "--partitions", "3", "--replication-factor", "1",
              env=env)
    assert r.returncode == 0, r.stderr
    lines = "".join(f"k{i}:v{i}\n" for i in range(300))
    r = strom("produce", "moving", "--key-separator", ":", input=lines, env=env)
    assert r.returncode == 0, r.stderr

    plan_file = tmp_path / "plan.json"
    r = strom("reassign", "plan", "--topics", "moving", "--brokers", "1,2",
              "--replication-factor", "2", "--plan-file", str(plan_file), "-o", "json", env=env)
    assert r.returncode == 0, r.stderr
    planned = json.loads(r.stdout)
    assert planned["proposed"] == json.loads(plan_file.read_text())
    targets = {p["partition"]: p["replicas"] for p in planned["proposed"]["partitions"]}
    assert sorted(targets) == [0, 1, 2]
    assert all(sorted(replicas) == [1, 2] for replicas in targets.values())

    r = strom("reassign", "execute", "--plan", str(plan_file), "--throttle", "10MB", env=env)
    assert r.returncode == 0, r.stderr
    assert "Current partition replica assignment" in r.stdout
    assert "Reassignment started for 3 of 3 partition(s)" in r.stdout

    r = strom("reassign", "status", "--plan", str(plan_file), "--watch", "--interval", "0.5",
              "--timeout", "90", env=env, timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Plan: 3 of 3 partition(s) on their target replicas." in r.stdout
    assert "Replication throttle removed (was 10000000 bytes/s)." in r.stdout
    r = strom("reassign", "status", "-o", "json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["throttle_bytes_per_sec"] is None

    r = strom("topic", "describe", "moving", "-o", "json", env=env)
    assert r.returncode == 0, r.stderr
    described = json.loads(r.stdout)
    parts = described["partitions"] if "partitions" in described else described[0]["partitions"]
    for p in parts:
        assert sorted(p["replicas"]) == [1, 2], p

    r = strom("leader", "elect", "--topic", "moving", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    r = strom("consume", "moving", "--from-beginning", "--max-messages", "300",
              "--timeout-ms", "30000", env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(f"v{i}" for i in range(300))

    r = strom("dev", "status", "--data-dir", str(data_dir), "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    status = json.loads(r.stdout)
    assert [b["voter"] for b in status["brokers"]] == [True, True, True]
    assert status["controller_id"] in (0, 1, 2)

    r = strom("dev", "down", "--data-dir", str(data_dir))
    assert r.returncode == 0, r.stderr
    assert not any(pid_alive(p) for p in pids)
