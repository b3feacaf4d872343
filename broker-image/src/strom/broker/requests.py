"""Checks of whole requests shared by the handlers: malformed requests fail as one call.

A request naming an empty topic, or asking for a negative partition, is malformed (a client bug,
not a state of the cluster), so the handler raises and the service layer aborts the call with
INVALID_REQUEST / INVALID_TOPIC_EXCEPTION in the gRPC status details. Unknown topics and
partitions are states of the cluster and are answered per partition instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from strom.protocol.errors import ErrorCode, StromError


def require_topic_names(topics: Iterable[str]) -> None:
    for i, topic in enumerate(topics):
        if not topic:
            raise StromError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"partitions[{i}].topic is empty; name a topic")
