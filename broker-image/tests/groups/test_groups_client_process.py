"""The Strom client's consumer groups and group admin against a real broker process.

Two consumers share a topic through the broker's coordinator (join, leader assignment, sync),
commit, and the admin API sees the group, its offsets and lag; after both close the group is
Empty and may be deleted. Needs the Group service in the broker's gRPC server.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from strom.client import Admin, Consumer, Producer
from strom.client.models import TopicPartition
from strom.protocol.records import Record
from strom.testing import running_broker

pytestmark = pytest.mark.integration


def test_two_consumers_share_a_topic_commit_and_the_group_is_deleted(tmp_path: Path) -> None:
    with running_broker(tmp_path, config={"group.initial.rebalance.delay.ms": 200}) as broker:
        boot = broker.bootstrap
        with Admin(boot) as admin:
            admin.create_topic("t", partitions=4)
        producer = Producer(boot)
        for i in range(40):
            producer.send("t", value=f"v{i}".encode(), partition=i % 4)
        producer.flush()
        producer.close()
        a = Consumer(boot, group_id="g", auto_offset_reset="earliest")
        b = Consumer(boot, group_id="g", auto_offset_reset="earliest")
        try:
            a.subscribe(["t"])
            b.subscribe(["t"])
            got: list[Record] = []
            end = time.monotonic() + 30
            while len({r.value for r in got}) < 40 and time.monotonic() < end:
                got += a.poll(200)
                got += b.poll(200)
            assert sorted(set(r.value or b"" for r in got)) == sorted(f"v{i}".encode()
                                                                      for i in range(40))
            # The first member may read everything before the second one's join is done, so the
            # group can still be rebalancing here: both keep polling (which drives join, sync and
            # the fetch of what each is given) until the group is Stable with both members, each
            # holds partitions, and each has read its partitions to the end.
            everything = {TopicPartition("t", p) for p in range(4)}
            with Admin(boot) as admin:
                end = time.monotonic() + 30
                while time.monotonic() < end:
                    a.poll(100)
                    b.poll(100)
                    described = admin.describe_group("g")
                    if (described.state == "Stable" and len(described.members) == 2
                            and a.assignment() and b.assignment()
                            and a.assignment() | b.assignment() == everything
                            and all(c.position(tp, timeout=5) == 10 for c in (a, b)
                                    for tp in c.assignment())):
                        break
                described = admin.describe_group("g")
                assert described.state == "Stable" and len(described.members) == 2, described
            assert a.assignment() | b.assignment() == everything
            assert not a.assignment() & b.assignment()
            a.commit()
            b.commit()
            with Admin(boot) as admin:
                described = admin.describe_group("g")
                assert described.state == "Stable" and len(described.members) == 2
                assert admin.list_group_offsets("g") == {
                    TopicPartition("t", p): 10 for p in range(4)}
                assert all(lag.committed == lag.log_end_offset == 10
                           for lag in admin.group_lag("g"))
                assert [g.group_id for g in admin.list_groups()] == ["g"]
        finally:
            a.close()
            b.close()
        with Admin(boot) as admin:
            end = time.monotonic() + 10
            while admin.describe_group("g").state != "Empty" and time.monotonic() < end:
                time.sleep(0.1)
            assert admin.describe_group("g").state == "Empty"
            assert admin.delete_groups(["g"]) == {"g": None}
            assert admin.list_group_offsets("g") == {}
