"""Kafka"s error codes and how each is handled: the one table every layer reads.

Clients decide whether to refresh metadata and retry from the code alone, exactly as Kafka clients
do, so the numbers are Kafka"s own (``org.apache.kafka.common.protocol.Errors``). Only the codes
Strom can produce are listed; new ones must keep Kafka"s number.

Each code has one row in :data:`ERROR_TABLE`: its handling classes (retriable as Kafka"s
``RetriableException`` subclasses are; "find the coordinator again"; "the group generation is
lost"; ...) and the gRPC status a failed call carries. The client"s retry sets, the controller
quorum client"s "try the leader or the next voter", the CLI"s "is a broker running?" hint, the
gRPC status mapping and the Kafka listener all derive from it
(:func:`codes_with`), so a code is classified once. Pure: no I/O and no grpc import (the gRPC
status is named by its ``google.rpc.Code`` name).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_CLUSTER_ID = 104
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108

    @property
    def retriable(self) -> bool:
        return Handling.RETRY in ERROR_TABLE[self].handling

    @property
    def spec(self) -> ErrorSpec:
        return ERROR_TABLE[self]


class Handling(enum.Flag):
    """What a client does on an error code (a code may be in several classes)."""

    FAIL = 0  #: nothing: the call fails with the code
    RETRY = enum.auto()  #: Kafka"s RetriableException: the same request may succeed later
    UNREACHABLE = enum.auto()  #: no broker answered in time: "is a broker running there?"
    FIND_COORDINATOR = enum.auto()  #: ask FindCoordinator again, then retry
    LOST_GENERATION = enum.auto()  #: a commit was refused: the partitions may be someone else"s
    RESET_MEMBER = enum.auto()  #: forget the member id and generation, join the group again
    NEW_PRODUCER_EPOCH = enum.auto()  #: the producer id/epoch is gone: get a new one, resend
    #: the controller quorum did not take it here: ask the hinted leader, else the next voter
    FIND_CONTROLLER = enum.auto()


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    handling: Handling
    #: The ``google.rpc.Code`` name of the status a failed gRPC call ends with.
    grpc_status: str


FAIL, RETRY = Handling.FAIL, Handling.RETRY
UNREACHABLE, FIND_COORDINATOR = Handling.UNREACHABLE, Handling.FIND_COORDINATOR
LOST_GENERATION, RESET_MEMBER = Handling.LOST_GENERATION, Handling.RESET_MEMBER
NEW_PRODUCER_EPOCH, FIND_CONTROLLER = Handling.NEW_PRODUCER_EPOCH, Handling.FIND_CONTROLLER
_row, E = ErrorSpec, ErrorCode

#: Every code: how it is handled and its gRPC status (UNAVAILABLE for retriable codes,
#: INVALID_ARGUMENT for the rest, unless a closer one exists).
ERROR_TABLE: Mapping[ErrorCode, ErrorSpec] = {
    E.UNKNOWN_SERVER_ERROR:                _row(FAIL, "INTERNAL"),
    E.NONE:                                _row(FAIL, "OK"),
    E.OFFSET_OUT_OF_RANGE:                 _row(FAIL, "OUT_OF_RANGE"),
    E.CORRUPT_MESSAGE:                     _row(RETRY, "UNAVAILABLE"),
    E.UNKNOWN_TOPIC_OR_PARTITION:          _row(RETRY, "NOT_FOUND"),
    E.INVALID_FETCH_SIZE:                  _row(FAIL, "INVALID_ARGUMENT"),
    E.LEADER_NOT_AVAILABLE:                _row(RETRY, "UNAVAILABLE"),
    E.NOT_LEADER_OR_FOLLOWER:              _row(RETRY, "FAILED_PRECONDITION"),
    E.REQUEST_TIMED_OUT:                   _row(RETRY | UNREACHABLE | FIND_CONTROLLER,
                                                "DEADLINE_EXCEEDED"),
    E.BROKER_NOT_AVAILABLE:                _row(RETRY | UNREACHABLE, "UNAVAILABLE"),
    E.REPLICA_NOT_AVAILABLE:               _row(RETRY, "UNAVAILABLE"),
    E.MESSAGE_TOO_LARGE:                   _row(FAIL, "INVALID_ARGUMENT"),
    E.NETWORK_EXCEPTION:                   _row(RETRY | UNREACHABLE, "UNAVAILABLE"),
    E.COORDINATOR_LOAD_IN_PROGRESS:        _row(RETRY | FIND_COORDINATOR, "UNAVAILABLE"),
    E.COORDINATOR_NOT_AVAILABLE:           _row(RETRY | FIND_COORDINATOR, "UNAVAILABLE"),
    E.NOT_COORDINATOR:                     _row(RETRY | FIND_COORDINATOR, "FAILED_PRECONDITION"),
    E.INVALID_TOPIC_EXCEPTION:             _row(FAIL, "INVALID_ARGUMENT"),
    E.RECORD_LIST_TOO_LARGE:               _row(FAIL, "INVALID_ARGUMENT"),
    E.NOT_ENOUGH_REPLICAS:                 _row(RETRY, "UNAVAILABLE"),
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND:    _row(RETRY, "UNAVAILABLE"),
    E.INVALID_REQUIRED_ACKS:               _row(FAIL, "INVALID_ARGUMENT"),
    E.ILLEGAL_GENERATION:                  _row(LOST_GENERATION | RESET_MEMBER, "INVALID_ARGUMENT"),
    E.INCONSISTENT_GROUP_PROTOCOL:         _row(FAIL, "INVALID_ARGUMENT"),
    E.INVALID_GROUP_ID:                    _row(FAIL, "INVALID_ARGUMENT"),
    E.UNKNOWN_MEMBER_ID:                   _row(LOST_GENERATION | RESET_MEMBER, "INVALID_ARGUMENT"),
    E.INVALID_SESSION_TIMEOUT:             _row(FAIL, "INVALID_ARGUMENT"),
    E.REBALANCE_IN_PROGRESS:               _row(RETRY | LOST_GENERATION, "UNAVAILABLE"),
    E.INVALID_COMMIT_OFFSET_SIZE:          _row(FAIL, "INVALID_ARGUMENT"),
    E.INVALID_TIMESTAMP:                   _row(FAIL, "INVALID_ARGUMENT"),
    E.UNSUPPORTED_VERSION:                 _row(FAIL, "UNIMPLEMENTED"),
    E.TOPIC_ALREADY_EXISTS:                _row(FAIL, "ALREADY_EXISTS"),
    E.INVALID_PARTITIONS:                  _row(FAIL, "INVALID_ARGUMENT"),
    E.INVALID_REPLICATION_FACTOR:          _row(FAIL, "INVALID_ARGUMENT"),
    E.INVALID_REPLICA_ASSIGNMENT:          _row(FAIL, "INVALID_ARGUMENT"),
    E.INVALID_CONFIG:                      _row(FAIL, "INVALID_ARGUMENT"),
    E.NOT_CONTROLLER:                      _row(RETRY | FIND_CONTROLLER, "FAILED_PRECONDITION"),
    E.INVALID_REQUEST:                     _row(FAIL, "INVALID_ARGUMENT"),
    E.UNSUPPORTED_FOR_MESSAGE_FORMAT:      _row(FAIL, "INVALID_ARGUMENT"),
    E.POLICY_VIOLATION:                    _row(FAIL, "INVALID_ARGUMENT"),
    E.OUT_OF_ORDER_SEQUENCE_NUMBER:        _row(FAIL, "INVALID_ARGUMENT"),
    E.DUPLICATE_SEQUENCE_NUMBER:           _row(FAIL, "INVALID_ARGUMENT"),
    E.INVALID_PRODUCER_EPOCH:              _row(NEW_PRODUCER_EPOCH, "INVALID_ARGUMENT"),
    E.INVALID_TXN_STATE:                   _row(FAIL, "FAILED_PRECONDITION"),
    E.KAFKA_STORAGE_ERROR:                 _row(RETRY, "UNAVAILABLE"),
    E.UNKNOWN_PRODUCER_ID:                 _row(NEW_PRODUCER_EPOCH, "INVALID_ARGUMENT"),
    E.REASSIGNMENT_IN_PROGRESS:            _row(FAIL, "INVALID_ARGUMENT"),
    E.NON_EMPTY_GROUP:                     _row(FAIL, "INVALID_ARGUMENT"),
    E.GROUP_ID_NOT_FOUND:                  _row(FAIL, "NOT_FOUND"),
    E.FETCH_SESSION_ID_NOT_FOUND:          _row(RETRY, "UNAVAILABLE"),
    E.INVALID_FETCH_SESSION_EPOCH:         _row(RETRY, "UNAVAILABLE"),
    E.FENCED_LEADER_EPOCH:                 _row(RETRY, "UNAVAILABLE"),
    E.UNKNOWN_LEADER_EPOCH:                _row(RETRY, "UNAVAILABLE"),
    E.UNSUPPORTED_COMPRESSION_TYPE:        _row(FAIL, "INVALID_ARGUMENT"),
    E.STALE_BROKER_EPOCH:                  _row(FAIL, "INVALID_ARGUMENT"),
    E.OFFSET_NOT_AVAILABLE:                _row(RETRY, "UNAVAILABLE"),
    E.MEMBER_ID_REQUIRED:                  _row(FAIL, "INVALID_ARGUMENT"),
    E.PREFERRED_LEADER_NOT_AVAILABLE:      _row(RETRY, "UNAVAILABLE"),
    E.GROUP_MAX_SIZE_REACHED:              _row(FAIL, "INVALID_ARGUMENT"),
    E.FENCED_INSTANCE_ID:                  _row(LOST_GENERATION, "INVALID_ARGUMENT"),
    E.ELIGIBLE_LEADERS_NOT_AVAILABLE:      _row(RETRY, "UNAVAILABLE"),
    E.ELECTION_NOT_NEEDED:                 _row(FAIL, "INVALID_ARGUMENT"),
    E.NO_REASSIGNMENT_IN_PROGRESS:         _row(FAIL, "INVALID_ARGUMENT"),
    E.GROUP_SUBSCRIBED_TO_TOPIC:           _row(FAIL, "INVALID_ARGUMENT"),
    E.INVALID_RECORD:                      _row(FAIL, "INVALID_ARGUMENT"),
    E.THROTTLING_QUOTA_EXCEEDED:           _row(RETRY, "UNAVAILABLE"),
    E.PRODUCER_FENCED:                     _row(FAIL, "INVALID_ARGUMENT"),
    E.INCONSISTENT_VOTER_SET:              _row(FAIL, "INVALID_ARGUMENT"),
    E.INVALID_UPDATE_VERSION:              _row(FAIL, "INVALID_ARGUMENT"),
    E.UNKNOWN_TOPIC_ID:                    _row(FAIL, "NOT_FOUND"),
    E.INCONSISTENT_CLUSTER_ID:             _row(FAIL, "INVALID_ARGUMENT"),
    E.INELIGIBLE_REPLICA:                  _row(FAIL, "INVALID_ARGUMENT"),
    E.NEW_LEADER_ELECTED:                  _row(RETRY, "UNAVAILABLE"),
}
del E, FAIL, RETRY, UNREACHABLE, FIND_COORDINATOR, LOST_GENERATION, RESET_MEMBER, NEW_PRODUCER_EPOCH
del FIND_CONTROLLER


def codes_with(handling: Handling) -> frozenset[ErrorCode]:
    """The codes whose row has every class in ``handling``."""
    return frozenset(code for code, spec in ERROR_TABLE.items() if handling in spec.handling)


class StromError(Exception):
    """An error with a Kafka error code and a message that names the field and the fix."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    @property
    def retriable(self) -> bool:
        return self.code.retriable


def error_code_from_int(value: int) -> ErrorCode:
    """Map a wire integer to an ErrorCode, unknown numbers to UNKNOWN_SERVER_ERROR."""
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
