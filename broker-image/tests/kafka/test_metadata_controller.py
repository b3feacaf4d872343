"""The controller id a Kafka client is told is always a broker it can reach.

librdkafka's admin client sends CreateTopics to the Metadata answer's ``controller_id`` and
waits for that broker to appear in the answer's broker list: an active controller that is a
fenced broker (or a dedicated controller process) left it waiting until its 60 s timeout
("Failed while waiting for controller", seen once in CI right after a cluster started).
"""

from __future__ import annotations

from strom.broker.kafka.metadata import client_controller_id


def test_the_active_controller_when_it_is_listed() -> None:
    assert client_controller_id(2, [0, 1, 2], this_broker=0) == 2


def test_this_broker_when_the_active_controller_is_not_listed() -> None:
    assert client_controller_id(2, [0, 1], this_broker=1) == 1  # controller fenced
    assert client_controller_id(100, [0, 1, 2], this_broker=0) == 0  # dedicated controller
    assert client_controller_id(-1, [0, 1, 2], this_broker=2) == 2  # no leader known yet


def test_any_listed_broker_when_this_one_is_not_listed_either() -> None:
    assert client_controller_id(2, [1, 0], this_broker=2) == 0
    assert client_controller_id(2, [], this_broker=2) == -1
