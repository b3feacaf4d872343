"""Pure pieces of the client's group support: option parsing and the commit error mapping."""

from __future__ import annotations

import pytest

from strom.client import CommitFailedError, ErrorCode, StromError, TopicPartition
from strom.client.commits import commit_error, commit_request, fetch_request, fetch_result
from strom.client.config import parse_assignment_strategy, resolve_auto_commit
from strom.client.fetcher import ConsumerSettings
from strom.client.group_member import compile_subscription, validate_offsets
from strom.protocol.v1 import group_pb2


def test_defaults_follow_kafka() -> None:
    s = ConsumerSettings.build("h:1", group_id="g")
    assert s.enable_auto_commit is True
    assert s.auto_commit_interval_ms == 5000
    assert s.session_timeout_ms == 45000 and s.heartbeat_interval_ms == 3000
    assert s.max_poll_interval_ms == 300000
    assert s.partition_assignment_strategy == ("range", "cooperative-sticky")
    assert not s.cooperative  # one eager assignor in the list makes the protocol eager
    assert ConsumerSettings.build("h:1").enable_auto_commit is False
    coop = ConsumerSettings.build("h:1", group_id="g",
                                  partition_assignment_strategy="cooperative-sticky")
    assert coop.cooperative


@pytest.mark.parametrize(("value", "expected"), [
    ("range", ("range",)),
    (["RoundRobin", "cooperative_sticky"], ("roundrobin", "cooperative-sticky")),
    ("org.apache.kafka.clients.consumer.CooperativeStickyAssignor", ("cooperative-sticky",)),
    ("range, range,sticky", ("range", "sticky")),
])
def test_assignment_strategy_names(value: str | list[str], expected: tuple[str, ...]) -> None:
    assert parse_assignment_strategy(value) == expected


def test_bad_strategy_and_auto_commit_without_group() -> None:
    with pytest.raises(StromError, match="unknown assignor 'best'"):
        parse_assignment_strategy(["best"])
    with pytest.raises(StromError, match="empty"):
        parse_assignment_strategy([])
    with pytest.raises(StromError, match="group_id"):
        resolve_auto_commit(None, True)
    assert resolve_auto_commit("g", False) is False


def test_commit_errors_map_lost_generation_to_commit_failed() -> None:
    for code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION,
                 ErrorCode.UNKNOWN_MEMBER_ID):
        err = commit_error(group_pb2.OffsetCommitResponse(partitions=[
            group_pb2.PartitionError(topic="t", partition=0, error_code=int(code))]))
        assert isinstance(err, CommitFailedError) and err.code is code
        assert "max_poll_interval_ms" in str(err)
    err = commit_error(group_pb2.OffsetCommitResponse(error_code=int(ErrorCode.NOT_COORDINATOR)))
    assert err is not None and not isinstance(err, CommitFailedError) and err.retriable
    assert commit_error(group_pb2.OffsetCommitResponse()) is None


def test_commit_and_fetch_requests() -> None:
    tp = TopicPartition("t", 1)
    req = commit_request("g", 4, "m", None, {tp: 9})
    assert (req.generation, req.member_id, req.group_instance_id) == (4, "m", "")
    assert [(p.topic, p.partition, p.offset) for p in req.partitions] == [("t", 1, 9)]
    assert [p.partition for p in fetch_request("g", [tp]).partitions] == [1]
    answer = group_pb2.OffsetFetchResponse(offsets=[
        group_pb2.CommittedOffset(topic="t", partition=1, offset=-1)])
    assert fetch_result(answer, [tp]) == {tp: None}
    answer.offsets[0].offset = 5
    assert fetch_result(answer, [tp]) == {tp: 5}
    answer.offsets[0].error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    with pytest.raises(StromError, match="t-1"):
        fetch_result(answer, [tp])


def test_subscription_arguments() -> None:
    assert compile_subscription(["a", "b"], None) == (frozenset({"a", "b"}), None)
    _, pattern = compile_subscription(None, "x-.*")
    assert pattern is not None and pattern.fullmatch("x-1")
    with pytest.raises(StromError, match="list of topic names"):
        compile_subscription("a", None)  # type: ignore[arg-type]
    with pytest.raises(StromError, match="regular expression"):
        compile_subscription(None, "(")
    with pytest.raises(StromError, match=">= 0"):
        validate_offsets({TopicPartition("t", 0): -1})
