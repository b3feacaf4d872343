"""ReplicaFetch: followers pull the partitions this broker leads (the ``Replica`` service).

Supports Kafka's follower fetch (KIP-320/KIP-595 truncation through the fetch path): per partition
the follower sends its log end offset, the epoch of its last record and the leader epoch it
believes in; it gets records up to this broker's log end offset (not the high watermark), the
high watermark, log start/end offsets, or ``diverging_epoch`` / ``diverging_end_offset`` (-1 when
there is no divergence) telling it where to truncate. Long-polls ``max_wait_ms`` while no partition
has new data. Errors are per partition: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (not
the leader, or the caller is not a replica), FENCED_/UNKNOWN_LEADER_EPOCH, OFFSET_OUT_OF_RANGE;
a bad ``replica_id`` or negative size fails the call with INVALID_REQUEST.

The work is :meth:`strom.replication.manager.ReplicaManager.replica_fetch` (the owner of the
logs and follower state); this module only counts per-partition errors.

Fetch sessions (KIP-227) are served (:mod:`strom.replication.sessions`): after a full fetch a
follower names only the partitions whose position changed and gets only the partitions with
news; session errors (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH) are answered at
the top level of the response.

Not supported: ``broker_epoch`` checks (a fenced broker's fetches are served; the controller
keeps it out of the ISR).
"""

from __future__ import annotations

from strom.broker.core import BrokerCore
from strom.protocol.errors import error_code_from_int
from strom.protocol.replica_fetch import Response
from strom.protocol.v1 import replica_pb2


async def handle(core: BrokerCore, request: replica_pb2.ReplicaFetchRequest) -> Response:
    head, answers = await core.replicas.replica_fetch(request)
    for p, _ in answers:
        if p.error_code:
            core.metrics.partition_errors.labels(
                "ReplicaFetch", error_code_from_int(p.error_code).name).inc()
    return head, answers
