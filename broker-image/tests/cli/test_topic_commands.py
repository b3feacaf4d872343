"""``strom topic ...`` against a real broker: create, list, describe, alter, grow, delete."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration


def test_topic_lifecycle_with_json_output(strom: Any, broker: Any) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)

    r = strom("topic", "create", "orders", "--partitions", "3", "--replication-factor", "1",
              "--config", "retention.ms=3600000", *bs)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Created topic orders."

    r = strom("topic", "list", "-o", "json", *bs)
    assert r.returncode == 0, r.stderr
    assert {"name": "orders", "partitions": 3, "replication_factor": 1,
            "internal": False} in json.loads(r.stdout)

    r = strom("topic", "describe", "orders", "-o", "json", *bs)
    assert r.returncode == 0, r.stderr
    (topic,) = json.loads(r.stdout)
    assert topic["name"] == "orders"
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2]
    assert all(p["log_end_offset"] == 0 for p in topic["partitions"])
    assert topic["configs"].get("retention.ms") == "3600000"

    r = strom("topic", "alter", "orders", "--config", "retention.ms=60000", *bs)
    assert r.returncode == 0, r.stderr
    r = strom("topic", "describe", "orders", "-o", "yaml", *bs)
    assert yaml.safe_load(r.stdout)[0]["configs"]["retention.ms"] == "60000"

    r = strom("topic", "alter", "orders", "--delete-config", "retention.ms", *bs)
    assert r.returncode == 0, r.stderr
    r = strom("topic", "describe", "orders", "-o", "json", *bs)
    assert "retention.ms" not in json.loads(r.stdout)[0]["configs"]

    r = strom("topic", "add-partitions", "orders", "--partitions", "5", *bs)
    assert r.returncode == 0, r.stderr
    r = strom("topic", "describe", "orders", "-o", "json", *bs)
    assert len(json.loads(r.stdout)[0]["partitions"]) == 5

    r = strom("topic", "describe", *bs)  # table of all topics
    assert r.returncode == 0
    assert "Topic: orders" in r.stdout and "PARTITION" in r.stdout

    r = strom("topic", "delete", "orders", *bs)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Deleted topic orders."
    r = strom("topic", "list", "-o", "json", *bs)
    assert "orders" not in [t["name"] for t in json.loads(r.stdout)]


def test_create_twice_is_exit_1_unless_if_not_exists(strom: Any, broker: Any) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    assert strom("topic", "create", "t", "--partitions", "1", *bs).returncode == 0
    r = strom("topic", "create", "t", "--partitions", "1", *bs)
    assert r.returncode == 1
    assert r.stderr.splitlines() == [r.stderr.strip()]
    assert r.stderr.startswith("strom: error: TOPIC_ALREADY_EXISTS")
    r = strom("topic", "create", "t", "--partitions", "1", "--if-not-exists", *bs)
    assert r.returncode == 0


def test_shrinking_partitions_is_refused(strom: Any, broker: Any) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    assert strom("topic", "create", "t", "--partitions", "3", *bs).returncode == 0
    r = strom("topic", "add-partitions", "t", "--partitions", "2", *bs)
    assert r.returncode == 1
    assert r.stderr.startswith("strom: error: INVALID_PARTITIONS")
    assert len(r.stderr.splitlines()) == 1


def test_bootstrap_from_the_environment_and_cluster_describe(strom: Any, broker: Any) -> None:
    r = strom("cluster", "describe", "-o", "json",
              env={"STROM_BOOTSTRAP_SERVERS": broker.bootstrap})
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["cluster_id"]
    (b,) = data["brokers"]
    assert f"{b['host']}:{b['port']}" == broker.bootstrap
    assert data["controller_id"] == b["id"]
