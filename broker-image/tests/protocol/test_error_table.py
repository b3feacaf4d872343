"""The error-code table agrees with Kafka's own definitions, and the client's sets derive from it.

Kafka's numbers and retriable flags are read from ``kio`` (generated from Kafka's ``Errors``), so a
wrong number or a silently changed retry class fails here; Strom's few deliberate departures are
listed with their reason.
"""

from __future__ import annotations

from google.rpc import code_pb2
from kio.schema.errors import ErrorCode as KafkaErrorCode

from strom.cli.main import UNREACHABLE
from strom.client import commits, group_state, sender
from strom.controller import quorum_client
from strom.protocol.errors import ERROR_TABLE, ErrorCode, Handling, codes_with
from strom.transport.status import grpc_code_for

#: Where Strom's retry class differs from Kafka's, and why.
DEPARTURES = {
    # A broker that is down or restarting comes back: Strom's clients retry it like a network
    # error, within their delivery/request timeout.
    "BROKER_NOT_AVAILABLE",
    # Strom's clients rejoin on it from the retry loop (Kafka handles it as a special case).
    "REBALANCE_IN_PROGRESS",
    # The preferred leader already leads: nothing to retry (Kafka files it under metadata errors).
    "ELECTION_NOT_NEEDED",
    # Strom routes by topic name; an unknown topic id means the topic was deleted.
    "UNKNOWN_TOPIC_ID",
    # The partition has a new leader: the client refreshes metadata and resends.
    "NEW_LEADER_ELECTED",
}


def test_every_code_has_one_row() -> None:
    assert set(ERROR_TABLE) == set(ErrorCode)


def test_numbers_are_kafkas() -> None:
    for code in ErrorCode:
        kafka = KafkaErrorCode[code.name.lower()]
        assert int(kafka) == int(code), code.name


def test_retriable_is_kafkas_but_for_the_listed_departures() -> None:
    differing = {code.name for code in ErrorCode
                 if KafkaErrorCode[code.name.lower()].retriable != code.retriable}
    assert differing == DEPARTURES


def test_grpc_status_names_are_google_rpc_codes() -> None:
    for code, spec in ERROR_TABLE.items():
        assert code_pb2.Code.Value(spec.grpc_status) >= 0, code.name
    assert grpc_code_for(ErrorCode.NOT_LEADER_OR_FOLLOWER) == code_pb2.FAILED_PRECONDITION
    assert grpc_code_for(ErrorCode.INVALID_CONFIG) == code_pb2.INVALID_ARGUMENT
    assert grpc_code_for(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND) == code_pb2.UNAVAILABLE


def test_client_and_cli_sets_come_from_the_table() -> None:
    assert commits.COORDINATOR_ERRORS == codes_with(Handling.FIND_COORDINATOR) == {
        ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
    assert codes_with(Handling.LOST_GENERATION) == commits.LOST_GENERATION_ERRORS
    assert {ErrorCode.ILLEGAL_GENERATION,
                                          ErrorCode.UNKNOWN_MEMBER_ID} == group_state.RESET_ERRORS
    assert {ErrorCode.UNKNOWN_PRODUCER_ID,
                                      ErrorCode.INVALID_PRODUCER_EPOCH} == sender._RESTAMP_ERRORS
    assert {ErrorCode.NETWORK_EXCEPTION, ErrorCode.BROKER_NOT_AVAILABLE,
                           ErrorCode.REQUEST_TIMED_OUT} == UNREACHABLE
    assert quorum_client._RETRY == codes_with(Handling.FIND_CONTROLLER) == {
        ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT}


def test_codes_that_find_the_coordinator_or_mean_unreachable_are_retried() -> None:
    # A class that makes the client act again must be retried or the action is never taken.
    for code in (codes_with(Handling.FIND_COORDINATOR) | codes_with(Handling.UNREACHABLE)
                 | codes_with(Handling.FIND_CONTROLLER)):
        assert code.retriable, code.name
