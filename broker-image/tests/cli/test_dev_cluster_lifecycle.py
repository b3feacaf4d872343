"""``strom dev up / status / down`` in a temp data dir, with real broker processes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from strom.cli.localcluster import pid_alive

pytestmark = pytest.mark.integration


def test_up_status_down(strom: Any, data_dir: Path, dev_pids: Any) -> None:
    r = strom("dev", "up", "--data-dir", str(data_dir), "--base-port", "0", "-o", "json")
    assert r.returncode == 0, r.stderr
    state = json.loads(r.stdout)
    (broker,) = state["brokers"]
    bootstrap = f"{broker['host']}:{broker['port']}"
    assert broker["host"] == "127.0.0.1"
    assert pid_alive(broker["pid"])
    assert (data_dir / "cluster.json").exists()
    assert (data_dir / "broker-0" / "broker.log").stat().st_size > 0
    assert (data_dir / "broker-0" / "broker.pid").read_text().strip() == str(broker["pid"])
    assert "ready" in r.stderr
    kafka = f"127.0.0.1:{broker['kafka_port']}"
    assert f"kafka {kafka}" in r.stderr  # each broker's Kafka-protocol address is printed

    r = strom("dev", "status", "--data-dir", str(data_dir), "-o", "json")
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    assert status["bootstrap"] == bootstrap
    assert status["brokers"][0]["alive"] and status["brokers"][0]["ready"]
    assert status["kafka_bootstrap"] == kafka and status["brokers"][0]["kafka"] == kafka

    r = strom("dev", "status", "--data-dir", str(data_dir))
    assert r.returncode == 0
    assert "BROKER" in r.stdout and str(broker["pid"]) in r.stdout

    # the cluster is usable from another process
    r = strom("topic", "create", "t", "--partitions", "2", "--bootstrap-server", bootstrap)
    assert r.returncode == 0, r.stderr

    # up again: reports the running cluster, starts nothing new
    r = strom("dev", "up", "--data-dir", str(data_dir), "--base-port", "0")
    assert r.returncode == 0, r.stderr
    assert f"Bootstrap: {bootstrap}" in r.stdout
    assert f"export STROM_BOOTSTRAP_SERVERS={bootstrap}" in r.stdout
    assert dev_pids(data_dir) == [broker["pid"]]

    r = strom("dev", "down", "--data-dir", str(data_dir))
    assert r.returncode == 0, r.stderr
    assert "stopped" in r.stdout
    assert not pid_alive(broker["pid"])
    assert not (data_dir / "cluster.json").exists()

    r = strom("dev", "status", "--data-dir", str(data_dir))
    assert r.returncode == 1
    assert "no dev cluster recorded" in r.stderr

    # data survives down/up: the topic is still there
    r = strom("dev", "up", "--data-dir", str(data_dir), "--base-port", "0", "-o", "json")
    assert r.returncode == 0, r.stderr
    (broker,) = json.loads(r.stdout)["brokers"]
    r = strom("topic", "list", "-o", "json",
              "--bootstrap-server", f"{broker['host']}:{broker['port']}")
    assert [t["name"] for t in json.loads(r.stdout)] == ["t"]


def test_a_dead_broker_shows_in_status_and_up_restarts_it(strom: Any, data_dir: Path) -> None:
    r = strom("dev", "up", "--data-dir", str(data_dir), "--base-port", "0", "-o", "json")
    assert r.returncode == 0, r.stderr
    (broker,) = json.loads(r.stdout)["brokers"]
    os.kill(broker["pid"], signal.SIGKILL)
    for _ in range(100):
        if not pid_alive(broker["pid"]):
            break
        import time

        time.sleep(0.05)
    r = strom("dev", "status", "--data-dir", str(data_dir), "-o", "json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["brokers"][0]["alive"] is False

    r = strom("dev", "up", "--data-dir", str(data_dir), "--base-port", "0", "-o", "json")
    assert r.returncode == 0, r.stderr
    (again,) = json.loads(r.stdout)["brokers"]
    assert again["pid"] != broker["pid"] and pid_alive(again["pid"])


def test_a_broker_that_cannot_start_is_reported_with_its_log(strom: Any, data_dir: Path) -> None:
    r = strom("dev", "up", "--data-dir", str(data_dir), "--base-port", "0",
              "--set", "num.partitions=-5")
    assert r.returncode == 1
    last = r.stderr.splitlines()[-1]
    assert last.startswith("strom: error: broker 0 exited during start-up")
    assert "num.partitions" in last
    assert not (data_dir / "cluster.json").exists()
