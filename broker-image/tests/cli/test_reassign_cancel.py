"""A throttled reassignment seen in flight by ``strom reassign status`` and cancelled by
``strom reassign cancel``, on a real 2-broker cluster (``strom.testing.running_cluster``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from strom.testing import running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_status_shows_a_throttled_move_and_cancel_restores_the_replicas(
        strom: Any, tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=2, default_replication_factor=1) as cluster:
        env = {"STROM_BOOTSTRAP_SERVERS": cluster.bootstrap}
        with cluster.admin() as admin:
            admin.create_topic("slow", partitions=1, replication_factor=1)
            cluster.wait_for_leader("slow", 0, timeout=30)
            (desc,) = admin.describe_topics(["slow"])
        (source,) = desc.partitions[0].replicas
        target = 1 - source
        value = "x" * 1000
        lines = "".join(f"{value}{i}\n" for i in range(3000))  # ~3 MB
        r = strom("produce", "slow", input=lines, env=env)
        assert r.returncode == 0, r.stderr
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "slow", "partition": 0, "replicas": [target]}]}))
        r = strom("reassign", "execute", "--plan", str(plan), "--throttle", "50KB", env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        rollback = r.stdout.splitlines()[1]
        assert json.loads(rollback)["partitions"] == [
            {"topic": "slow", "partition": 0, "replicas": [source]}]

        r = strom("reassign", "status", "--plan", str(plan), "-o", "json", env=env)
        assert r.returncode == 1, r.stdout + r.stderr  # not done
        status = json.loads(r.stdout)
        (moving,) = status["reassignments"]
        assert moving["adding"] == [target] and moving["removing"] == [source]
        assert status["throttle_bytes_per_sec"] == 50_000
        assert status["plan"][0]["done"] is False

        r = strom("reassign", "status", "--plan", str(plan), "--watch", "--interval", "0.2",
                  "--timeout", "1", env=env)
        assert r.returncode == 1 and "not done after --timeout 1 s" in r.stderr, r.stderr

        r = strom("reassign", "cancel", "--topics", "slow", env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "Cancelled the reassignment of 1 of 1 partition(s)" in r.stdout

        def back() -> bool:
            with cluster.admin() as admin:
                (d,) = admin.describe_topics(["slow"])
                return (not admin.list_partition_reassignments(["slow"])
                        and d.partitions[0].replicas == [source])

        cluster.wait_until(back, timeout=30, what="slow-0 back on its original replica")
        r = strom("reassign", "status", env=env)
        assert r.returncode == 0 and "No reassignment in progress." in r.stdout, r.stdout
        r = strom("consume", "slow", "--from-beginning", "--max-messages", "3000",
                  "--timeout-ms", "30000", env=env)
        assert r.returncode == 0, r.stderr
        assert len(r.stdout.splitlines()) == 3000
