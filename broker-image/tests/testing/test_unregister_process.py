"""A broker removed for good is unregistered only once it is down and holds no replica."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.protocol.errors import StromError
from strom.testing import running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_unregister_a_drained_stopped_broker(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=3) as cluster, cluster.admin() as admin:
        admin.create_topic("t", partitions=1, replication_factor=2)
        admin.alter_partition_reassignments({("t", 0): [0, 2]})
        cluster.wait_until(lambda: not admin.list_partition_reassignments(["t"]) or None,
                           timeout=30, what="t-0 on brokers 0 and 2")
        with pytest.raises(StromError, match="alive"):
            admin.unregister_broker(2)
        cluster.stop_broker(2)
        cluster.wait_until(lambda: 2 in admin.describe_cluster().fenced_broker_ids or None,
                           timeout=30, what="broker 2 fenced")
        with pytest.raises(StromError, match="still hosts"):
            admin.unregister_broker(2)
        admin.alter_partition_reassignments({("t", 0): [0, 1]})
        cluster.wait_until(lambda: not admin.list_partition_reassignments(["t"]) or None,
                           timeout=30, what="t-0 moved off broker 2")
        admin.unregister_broker(2)
        described = admin.describe_cluster()
        assert 2 not in described.fenced_broker_ids
        assert sorted(b.broker_id for b in described.brokers) == [0, 1]
