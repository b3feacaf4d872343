"""A group whose coordinator cannot store its metadata ends with an error, not silence.

``__consumer_offsets`` at RF 2 with min.insync.replicas=2 (3 brokers) loses a replica: the
coordinator's group-metadata writes fail with NOT_ENOUGH_REPLICAS, which it answers as
COORDINATOR_NOT_AVAILABLE (Kafka's GroupMetadataManager mapping). Before the fix the consumer
rejoined forever and ``poll`` returned nothing; now ``poll`` raises the last error once joining
has failed for ``default_api_timeout_ms``, and ``strom consume --group`` prints one error line
and exits 1.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from strom.client import Consumer
from strom.groups.offsets import OFFSETS_TOPIC
from strom.protocol.errors import ErrorCode, StromError
from strom.testing import running_cluster

pytestmark = pytest.mark.integration


def test_consumer_raises_when_the_group_cannot_be_stored(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=3, config={
            "min.insync.replicas": 2, "offsets.topic.replication.factor": 2,
            "offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0}) as cluster:
        with cluster.admin() as admin:
            admin.create_topic("t", partitions=1, replication_factor=2)
            admin.find_coordinator("g")  # creates __consumer_offsets
        cluster.wait_for_isr(OFFSETS_TOPIC, 0, 2, timeout=20)
        leader = cluster.wait_for_leader(OFFSETS_TOPIC, 0, timeout=20)
        with cluster.admin() as admin:
            (part,) = admin.describe_topics([OFFSETS_TOPIC], include_internal=True)[0].partitions
        (follower,) = [b for b in part.replicas if b != leader]
        cluster.kill(follower)
        cluster.wait_for_isr(OFFSETS_TOPIC, 0, 1, timeout=20)

        consumer = Consumer(cluster.bootstrap, group_id="g", auto_offset_reset="earliest",
                            default_api_timeout_ms=4000, request_timeout_ms=3000)
        start = time.monotonic()
        try:
            consumer.subscribe(["t"])
            with pytest.raises(StromError) as caught:
                while time.monotonic() - start < 30:
                    consumer.poll(200)
        finally:
            consumer.close()
        assert caught.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert "joining has failed" in caught.value.message
        assert time.monotonic() - start < 15

        script = Path(sys.executable).parent / "strom"
        proc = subprocess.run(
            [str(script), "consume", "t", "--group", "g2", "--from-beginning",
             "--max-messages", "1", "--request-timeout-ms", "2000",
             "--bootstrap-server", cluster.bootstrap],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert proc.returncode == 1, proc.stderr
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("strom: error:")]
        assert len(errors) == 1 and "COORDINATOR_NOT_AVAILABLE" in errors[0], proc.stderr
