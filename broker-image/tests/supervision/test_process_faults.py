"""Real broker processes: a zombie controller cannot be made by a stray AppendEntries, and a
task that fails for good stops the process with exit status 1 (``/readyz`` no longer 200)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from strom import supervision
from strom.protocol.errors import ErrorCode
from strom.protocol.v1 import admin_pb2, quorum_pb2
from strom.testing import BrokerProcess, running_broker
from strom.transport.status import from_rpc_error
from strom.transport.v1 import admin_pb2_grpc, quorum_pb2_grpc

pytestmark = pytest.mark.integration


def _create(channel: grpc.Channel, name: str) -> int:
    admin: Any = admin_pb2_grpc.AdminStub(channel)  # type: ignore[no-untyped-call]
    response = admin.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[
        admin_pb2.NewTopic(name=name, num_partitions=1, replication_factor=1)]), timeout=10)
    return int(response.results[0].error_code)


def test_append_entries_from_a_non_voter_is_refused_and_the_controller_lives(
        tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker, grpc.insecure_channel(broker.bootstrap) as channel:
        quorum: Any = quorum_pb2_grpc.QuorumStub(channel)  # type: ignore[no-untyped-call]
        state = quorum.DescribeQuorum(quorum_pb2.DescribeQuorumRequest(), timeout=5)
        for sender in (7, state.node_id):  # a non-voter, and this node's own id
            with pytest.raises(grpc.RpcError) as info:
                quorum.AppendEntries(quorum_pb2.AppendEntriesRequest(
                    sender=sender, term=state.term, prev_log_index=state.last_index,
                    prev_log_term=state.term, leader_commit=state.commit_index), timeout=5)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert from_rpc_error(info.value).code == ErrorCode.INCONSISTENT_VOTER_SET
        with pytest.raises(grpc.RpcError) as info:
            quorum.Vote(quorum_pb2.VoteRequest(sender=state.node_id, term=state.term + 1,
                                                cluster_id="someone-else"), timeout=5)
        assert from_rpc_error(info.value).code == ErrorCode.INCONSISTENT_CLUSTER_ID
        # The Raft loop still runs: metadata changes commit, and the node still leads.
        assert _create(channel, "after") == 0
        after = quorum.DescribeQuorum(quorum_pb2.DescribeQuorumRequest(), timeout=5)
        assert after.leader_id == state.node_id and after.term == state.term
        assert broker.is_ready()
        assert "Traceback" not in broker.stderr_path.read_text()


def test_a_critical_task_failure_exits_non_zero(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, env={supervision.FAULT_ENV: "raft-driver@2.0"})
    try:
        broker.start()
        seen_not_ready = False
        deadline = time.monotonic() + 30
        while broker.is_alive() and time.monotonic() < deadline:
            if not broker.is_ready():
                seen_not_ready = True
            time.sleep(0.02)
        assert not broker.is_alive(), "the broker kept running with a dead Raft driver"
        assert broker.returncode == 1
        assert seen_not_ready
        stderr = broker.stderr_path.read_text()
        assert "task raft-driver failed (InjectedFault" in stderr
        assert "exits with status 1" in stderr
    finally:
        broker.stop()
