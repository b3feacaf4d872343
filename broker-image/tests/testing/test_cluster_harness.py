"""The cluster harness without processes: ports, voters, config merging, bounded waits."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.testing import (
    CLUSTER_TEST_DEFAULTS,
    Cluster,
    ClusterTimeout,
    config_from_kwargs,
    free_ports,
    voters_string,
)


def test_free_ports_are_distinct() -> None:
    ports = free_ports(12)
    assert len(set(ports)) == 12 and all(0 < p < 65536 for p in ports)


def test_voters_string_lists_ids_in_order() -> None:
    assert voters_string({2: 9002, 0: 9000}) == "0@127.0.0.1:9000,2@127.0.0.1:9002"


def test_cluster_config_names_the_first_three_as_voters(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 5)
    assert cluster.voter_ids == [0, 1, 2]
    voters = cluster.config["controller.quorum.voters"]
    assert voters == ",".join(f"{i}@127.0.0.1:{cluster.brokers[i].port}" for i in range(3))
    assert cluster.config["default.replication.factor"] == "3"
    for key, value in CLUSTER_TEST_DEFAULTS.items():
        assert cluster.config[key] == value
    ports = [b.port for b in cluster.brokers.values()] + [
        b.metrics_port for b in cluster.brokers.values()]
    assert len(set(ports)) == 10
    for bid, broker in cluster.brokers.items():
        assert broker.config["broker.id"] == str(bid)
        assert broker.config["controller.quorum.voters"] == voters
        assert broker.config["port"] == str(broker.port)
    assert cluster.bootstrap.split(",") == [b.bootstrap for b in cluster.brokers.values()]
    assert not any(b.is_alive() for b in cluster.brokers.values())


def test_caller_settings_win_over_the_test_defaults(tmp_path: Path) -> None:
    settings = config_from_kwargs({"broker_session_timeout_ms": 9000, "min_insync_replicas": 2})
    cluster = Cluster(tmp_path, [4, 5], voters=[5], config={**settings,
                                                             "unclean.leader.election.enable":
                                                             True})
    assert cluster.voter_ids == [5]
    assert cluster.config["broker.session.timeout.ms"] == "9000"
    assert cluster.config["min.insync.replicas"] == "2"
    assert cluster.config["unclean.leader.election.enable"] == "true"
    assert cluster.config["default.replication.factor"] == "2"
    assert cluster.config["controller.quorum.voters"] == f"5@127.0.0.1:{cluster.brokers[5].port}"


@pytest.mark.parametrize("brokers, voters", [(3, 0), (3, 4), (3, [7]), (0, None), ([1, 1], None)])
def test_bad_shapes_are_refused(tmp_path: Path, brokers: object, voters: object) -> None:
    with pytest.raises(ValueError):
        Cluster(tmp_path, brokers, voters=voters)  # type: ignore[arg-type]


def test_wait_until_returns_the_value_and_tolerates_errors(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 1)
    calls = iter([ConnectionError("down"), None, "", "ok"])

    def probe() -> str | None:
        item = next(calls)
        if isinstance(item, Exception):
            raise item
        return item  # type: ignore[return-value]

    assert cluster.wait_until(probe, timeout=5, interval=0.01) == "ok"
    # broker 0 is an answer, not "not yet"; empty lists and False are "not yet"
    answers = iter([[], False, None, 0])
    assert cluster.wait_until(lambda: next(answers), timeout=5, interval=0.01) == 0


def test_wait_until_fails_clearly_and_in_bounded_time(tmp_path: Path) -> None:
    import time

    cluster = Cluster(tmp_path, 2)
    start = time.monotonic()
    with pytest.raises(ClusterTimeout) as info:
        cluster.wait_until(lambda: None, timeout=0.3, interval=0.05, what="the moon")
    assert time.monotonic() - start < 2
    text = str(info.value)
    assert "the moon" in text and "0.3s" in text and "brokers down: [0, 1]" in text
