"""Pure parts of the clustering commands: sizes, id lists, status/plan views, cluster health."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from strom.cli import reassign_view as view
from strom.cli.cluster import cluster_table, cluster_to_dict, partition_health
from strom.cli.errors import UsageError
from strom.cli.parsing import parse_int_list, parse_name_list, parse_size
from strom.client.models import (
    BrokerDescription,
    ClusterDescription,
    PartitionDescription,
    PartitionReassignment,
    TopicDescription,
)


@pytest.mark.parametrize("text, size", [
    ("10MB", 10_000_000), ("512KiB", 524_288), ("1.5GiB", 1_610_612_736), ("4096", 4096),
    ("2 mb", 2_000_000), ("7b", 7), ("1k", 1000), ("3bytes", 3),
])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text, "--throttle") == size


@pytest.mark.parametrize("text", ["", "MB", "-1MB", "0", "10XB", "nanMB", "0.1b", "inf"])
def test_bad_sizes_name_the_flag(text: str) -> None:
    with pytest.raises(UsageError, match="--throttle"):
        parse_size(text, "--throttle")


def test_id_and_name_lists() -> None:
    assert parse_int_list(" 2, 3,4 ", "--brokers") == [2, 3, 4]
    assert parse_name_list("a,b,a", "--topics") == ["a", "b"]
    for bad in ("", "a", "1,-2", "1,1"):
        with pytest.raises(UsageError):
            parse_int_list(bad, "--brokers")


def reassignment(**kw: object) -> PartitionReassignment:
    base: dict[str, object] = dict(topic="t", partition=0, replicas=[0, 1, 2, 3],
                                   adding=[3], removing=[0], isr=[0, 1, 2], leader=1,
                                   leader_log_end_offset=1000, progress={3: 250})
    base.update(kw)
    return PartitionReassignment(**base)  # type: ignore[arg-type]


def test_status_table_shows_progress_and_offsets_behind() -> None:
    data = {"reassignments": [view.reassignment_data(reassignment())], "done": False}
    text = view.status_table(data)
    header, row = text.splitlines()
    assert header.split() == ["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING", "ISR",
                              "LEADER", "PROGRESS", "BEHIND"]
    assert row.split() == ["t", "0", "0,1,2,3", "3", "0", "0,1,2", "1", "25.0%", "750"]
    unknown = view.reassignment_data(reassignment(progress={}, leader_log_end_offset=-1))
    assert unknown["percent_done"] is None and unknown["offsets_behind"] == {}
    assert "?" in view.status_table({"reassignments": [unknown]})
    assert view.status_table({"reassignments": []}) == "No reassignment in progress."


def test_plan_progress_is_done_only_at_the_target_and_not_moving() -> None:
    plan = {("t", 0): [2, 3, 4], ("t", 1): [3, 4, 2]}
    current = {("t", 0): [4, 3, 2], ("t", 1): [0, 3, 4, 2]}
    rows = view.plan_progress(plan, current, in_flight={("t", 1)})
    assert [r["done"] for r in rows] == [True, False]
    text = view.status_table({"reassignments": [], "plan": rows})
    assert "Plan: 1 of 2 partition(s) on their target replicas: waiting for t-1" in text
    throttled = view.status_table({"reassignments": [], "throttle_bytes_per_sec": 1000})
    assert "Replication throttle: 1000 bytes/s." in throttled
    removed = view.status_table({"reassignments": [], "throttle_bytes_per_sec": 1000,
                                 "throttle_removed": True})
    assert "Replication throttle removed (was 1000 bytes/s)." in removed


def test_results_table_lists_only_failures() -> None:
    ok = [{"topic": "t", "partition": 0, "error": None}]
    assert view.results_table(ok, "Started 1 of 1") == "Started 1 of 1."
    bad = [*ok, {"topic": "t", "partition": 1, "error": "X: y"}]
    lines = view.results_table(bad, "Started 1 of 2").splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "ERROR"] and "X: y" in lines[1]


def test_cluster_describe_data_and_table() -> None:
    desc = ClusterDescription(
        cluster_id="c1", controller_id=1,
        brokers=[BrokerDescription(0, "127.0.0.1", 9092, "a"),
                 BrokerDescription(1, "127.0.0.1", 9093),
                 BrokerDescription(3, "127.0.0.1", 9095)],
        fenced_broker_ids=[3], voters=[0, 1], metadata_offset=17, answered_by=0)
    topics = [TopicDescription("t", "id", False, [
        PartitionDescription(0, 1, 0, [0, 1, 3], [0, 1]),
        PartitionDescription(1, -1, 0, [3], []),
        PartitionDescription(2, 0, 0, [0, 1], [0, 1]),
        PartitionDescription(3, 0, 0, [0], [0]),  # not under-replicated, but below min ISR
    ], min_insync_replicas=2)]
    assert partition_health(topics) == {"total": 4, "under_replicated": 2, "under_min_isr": 1,
                                        "offline": 1, "offline_replicas": 0,
                                        "under_min_isr_partitions": ["t-3"]}
    data = cluster_to_dict(desc, topics)
    assert [(b["id"], b["state"], b["voter"], b["controller"]) for b in data["brokers"]] == [
        (0, "alive", True, False), (1, "alive", True, True), (3, "fenced", False, False)]
    text = cluster_table(data)
    assert text.splitlines()[0] == ("ClusterId: c1  Controller: 1  Voters: 0,1  "
                                    "MetadataOffset: 17 (broker 0)")
    assert text.splitlines()[-2] == ("Topics: 1  Partitions: 4  UnderReplicated: 2  "
                                     "UnderMinIsr: 1  Offline: 1  OfflineReplicas: 0")
    assert text.splitlines()[-1] == ("Unhealthy: below min.insync.replicas (acks=all writes "
                                     "refused): t-3")
    old_style = SimpleNamespace(cluster_id="c", controller_id=0,
                                brokers=[BrokerDescription(0, "h", 1)])
    assert "MetadataOffset: -" in cluster_table(cluster_to_dict(old_style))
