"""``strom dev demo``: the main job, end to end, with real broker processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def kill_recorded(data_dir: Path) -> None:
    with contextlib.suppress(OSError, ValueError, KeyError):
        for b in json.loads((data_dir / "cluster.json").read_text())["brokers"]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(b["pid"], signal.SIGKILL)


def test_demo_starts_a_cluster_verifies_20000_records_and_stops_it(
        strom: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "demo"
    try:
        r = strom("dev", "demo", "--records", "20000", "--data-dir", str(data_dir),
                  "--base-port", "0", timeout=240)
        assert r.returncode == 0, r.stderr
        assert "Demo OK: 20000 records" in r.stdout
        assert "Kafka client OK: confluent-kafka produced 1000 records" in r.stdout
        assert "produce" in r.stdout and "consume" in r.stdout
        assert "strom consume demo --from-beginning --max-messages 5" in r.stdout
        assert "records/s" in r.stderr  # progress
        assert "stopped the cluster the demo started" in r.stderr
        assert not (data_dir / "cluster.json").exists()
    finally:
        kill_recorded(data_dir)
        strom("dev", "down", "--data-dir", str(data_dir))


def test_demo_reuses_a_running_dev_cluster_and_leaves_it_running(
        strom: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "dev"
    try:
        r = strom("dev", "up", "--data-dir", str(data_dir), "--base-port", "0", "-o", "json")
        assert r.returncode == 0, r.stderr
        (broker,) = json.loads(r.stdout)["brokers"]
        bootstrap = f"{broker['host']}:{broker['port']}"
        for _ in range(2):  # a second run appends and verifies only its own records
            r = strom("dev", "demo", "--records", "3000", "--data-dir", str(data_dir),
                      timeout=240)
            assert r.returncode == 0, r.stderr
            assert "already running" in r.stderr
        r = strom("offsets", "demo", "-o", "json", "--bootstrap-server", bootstrap)
        assert sum(row["offset"] for row in json.loads(r.stdout)) == 6000
        r = strom("consume", "demo", "--from-beginning", "--max-messages", "5",
                  "--bootstrap-server", bootstrap)
        assert r.returncode == 0 and len(r.stdout.splitlines()) == 5
    finally:
        strom("dev", "down", "--data-dir", str(data_dir))
        kill_recorded(data_dir)
