"""Consumer groups end to end: real brokers, consumer processes, ``kill -9``, the CLI.

- 3 consumer processes in one group on a 6-partition topic get 2 partitions each; ``kill -9`` of
  one moves its partitions to the others within the session timeout; no record is skipped and a
  record is read twice only if it was past its first reader's last commit (the uncommitted
  window).
- The coordinator broker of a group is killed (-9) in a 3-broker cluster (RF=3
  ``__consumer_offsets``): the consumer finds the new coordinator and the group resumes from its
  committed offsets.
- Two groups on one topic each read every record (pub/sub).
- A static member (``group_instance_id``) restarted within the session timeout causes no
  rebalance: same generation, the other member keeps its partitions.
- ``strom group list/describe/reset-offsets/delete`` against a real broker.

Consumers run as ``python -c`` processes that print one JSON line per event (assignment, record,
commit) so a test can kill them like a crashed application and still know what they did.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from strom.client import Admin, Consumer, Producer, TopicPartition
from strom.testing import running_broker, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T = TypeVar("T")

SESSION_MS = 6000
#: Fast groups for tests: short sessions allowed, no wait for more members on the first join.
GROUP_CONFIG = {
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
}

CONSUMER_SCRIPT = r"""
import json, sys, time
from strom.client import Consumer

bootstrap, topic, group, name, instance, session_ms, max_s, commit_every = sys.argv[1:9]

def out(**event):
    print(json.dumps(event), flush=True)

def tps(parts):
    return sorted([tp.topic, tp.partition] for tp in parts)

class Listener:
    def on_partitions_revoked(self, parts):
        # commit what was processed before the partitions move (Kafka's recommended pattern)
        commit()
        out(event="revoked", partitions=tps(parts))

    def on_partitions_assigned(self, parts):
        out(event="assigned", partitions=tps(parts))

    def on_partitions_lost(self, parts):
        out(event="lost", partitions=tps(parts))

consumer = Consumer(bootstrap, group_id=group, client_id=name,
                    group_instance_id=instance or None, enable_auto_commit=False,
                    auto_offset_reset="earliest", session_timeout_ms=int(session_ms),
                    heartbeat_interval_ms=max(100, int(session_ms) // 6),
                    max_poll_records=50)

def commit():
    positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
    if not positions:
        return
    try:
        consumer.commit(positions)
    except Exception as exc:
        out(event="commit-failed", error=repr(exc))
        return
    out(event="committed", offsets=sorted([tp.partition, o] for tp, o in positions.items()))

consumer.subscribe([topic], listener=Listener())
out(event="subscribed")
# commit every `commit_every` polls that returned records, and whenever a poll comes back
# empty: a kill between commits leaves an uncommitted window that the next owner reads again
deadline = time.time() + float(max_s)
pending = 0
while time.time() < deadline:
    records = consumer.poll(timeout_ms=100)
    for r in records:
        out(event="record", p=r.partition, o=r.offset, v=r.value.decode())
    pending += 1 if records else 0
    if pending and (pending >= int(commit_every) or not records):
        commit()
        pending = 0
consumer.close()
out(event="closed")
"""


def wait_until(predicate: Callable[[], T | None], timeout: float, what: str,
               interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as exc:  # a broker mid-failover: keep polling until the deadline
            last = exc
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last error: {last})")


class ConsumerProc:
    """One consumer process and the events it printed (read by a thread as they come)."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str, *,
                 instance: str = "", session_ms: int = SESSION_MS, max_s: float = 240,
                 commit_every: int = 1) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CONSUMER_SCRIPT, bootstrap, topic, group, name, instance,
             str(session_ms), str(max_s), str(commit_every)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                event = json.loads(line)
                with self.lock:
                    self.events.append(event)

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.events)

    def assignment(self) -> set[int] | None:
        """Partitions after the last assignment event (None before the first)."""
        owned: set[int] | None = None
        for e in self.snapshot():
            if e["event"] == "assigned":
                owned = {p for _, p in e["partitions"]}
            elif e["event"] in ("revoked", "lost"):
                owned = (owned or set()) - {p for _, p in e["partitions"]}
        return owned

    def records(self) -> list[tuple[int, int]]:
        return [(e["p"], e["o"]) for e in self.snapshot() if e["event"] == "record"]

    def last_commits(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for e in self.snapshot():
            if e["event"] == "committed":
                out.update({p: o for p, o in e["offsets"]})
        return out

    def count(self, event: str) -> int:
        return sum(1 for e in self.snapshot() if e["event"] == event)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        stderr = self.proc.stderr.read() if self.proc.stderr is not None else ""
        if stderr.strip() and "Traceback" in stderr:
            print(f"--- {self.name} stderr ---\n{stderr[-3000:]}", file=sys.stderr)


@contextlib.contextmanager
def consumers() -> Iterator[list[ConsumerProc]]:
    """Every ConsumerProc appended to the yielded list is killed at the end."""
    procs: list[ConsumerProc] = []
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int,
            tag: str) -> None:
    with Producer(bootstrap, acks="all") as producer:
        futures = [producer.send(topic, f"{tag}-{p}-{i}".encode(), partition=p)
                   for i in range(per_partition) for p in range(partitions)]
        producer.flush()
        for f in futures:
            f.result(timeout=30)


def check_no_skip_and_bounded_duplicates(procs: list[ConsumerProc],
                                         log_end: dict[int, int]) -> int:
    """Every offset below the log end was read; a record read again was past its first reader's
    last printed commit (the uncommitted window). Returns the number of duplicates."""
    first_reader: dict[tuple[int, int], ConsumerProc] = {}
    seen: dict[tuple[int, int], int] = defaultdict(int)
    for proc in procs:
        for key in proc.records():
            seen[key] += 1
            first_reader.setdefault(key, proc)
    missing = [(p, o) for p, end in log_end.items() for o in range(end) if (p, o) not in seen]
    assert not missing, f"records never consumed: {missing[:20]}"
    duplicates = 0
    for (p, o), n in seen.items():
        if n == 1:
            continue
        duplicates += n - 1
        committed = first_reader[(p, o)].last_commits().get(p, 0)
        assert o >= committed, (f"record {p}:{o} read again although "
                                f"{first_reader[(p, o)].name} had committed {committed}")
    return duplicates


def stable_group(admin: Admin, group: str, members: int) -> Any:
    desc = admin.describe_group(group)
    if desc.state == "Stable" and len(desc.members) == members:
        return desc
    return None


# --- the flows ---------------------------------------------------------------------------------

def test_kill_9_of_a_member_moves_its_partitions_without_losing_records(tmp_path: Path) -> None:
    with running_broker(tmp_path / "b", config=GROUP_CONFIG) as broker, \
            Admin(broker.bootstrap) as admin, consumers() as procs:
        bs = broker.bootstrap
        admin.create_topic("orders", partitions=6)
        procs.extend(ConsumerProc(bs, "orders", "shop", f"c{i}", commit_every=4)
                     for i in range(3))
        wait_until(lambda: all(p.assignment() is not None and len(p.assignment() or ()) == 2
                               for p in procs), 60, "three members with 2 partitions each")
        desc = wait_until(lambda: stable_group(admin, "shop", 3), 30, "group Stable")
        assert sorted(len(m.assignment) for m in desc.members) == [2, 2, 2]
        owned = [p.assignment() or set() for p in procs]
        assert set().union(*owned) == set(range(6))

        produce(bs, "orders", 6, 50, "a")
        wait_until(lambda: all(p.last_commits().get(part) == 50
                               for p in procs for part in p.assignment() or ()),
                   60, "300 records read and committed")
        produce(bs, "orders", 6, 20, "b")  # some still in flight or uncommitted at the kill
        victim = procs[0]
        lost = victim.assignment() or set()
        victim.kill()
        killed_at = time.monotonic()
        survivors = procs[1:]
        wait_until(lambda: set().union(*(p.assignment() or set() for p in survivors))
                   == set(range(6)), SESSION_MS / 1000 + 20, "the killed member's partitions "
                   "reassigned to the survivors")
        moved_after = time.monotonic() - killed_at
        print(f"partitions moved {moved_after:.1f} s after the kill")
        # the coordinator notices the death after the session timeout; then one rebalance
        assert moved_after < SESSION_MS / 1000 + 10, moved_after
        assert all(len(p.assignment() or ()) == 3 for p in survivors)
        assert lost <= set().union(*(p.assignment() or set() for p in survivors))

        produce(bs, "orders", 6, 30, "c")
        total = 6 * (50 + 20 + 30)
        wait_until(lambda: len({k for p in procs for k in p.records()}) >= total, 60,
                   f"all {total} records read")
        log_end = {p: 100 for p in range(6)}
        duplicates = check_no_skip_and_bounded_duplicates(procs, log_end)
        print(f"{duplicates} duplicate(s) after the kill")
        assert duplicates <= 2 * 20  # at most the victim's uncommitted "b" records
        # the survivors commit what they read: the group's committed offsets reach the log end
        wait_until(lambda: admin.list_group_offsets("shop") == {
            TopicPartition("orders", p): 100 for p in range(6)}, 30, "commits at the log end")


def test_coordinator_kill_9_group_resumes_from_committed_offsets(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=3, config={
            **GROUP_CONFIG, "offsets.topic.replication.factor": "3"}) as cluster, \
            cluster.admin() as admin, consumers() as procs:
        bs = cluster.bootstrap
        admin.create_topic("events", partitions=3, replication_factor=3,
                           configs={"min.insync.replicas": "2"})
        for p in range(3):
            cluster.wait_for_isr("events", p, 3, timeout=30)
        first = ConsumerProc(bs, "events", "audit", "first")
        procs.append(first)
        produce(bs, "events", 3, 40, "a")
        wait_until(lambda: first.last_commits() == {0: 40, 1: 40, 2: 40}, 60,
                   "the first 120 records read and committed")
        coordinator, _ = admin.find_coordinator("audit")
        offsets_partition_isr = wait_until(
            lambda: all(len(cluster.isr_of("__consumer_offsets", p)) == 3 for p in range(3)),
            30, "__consumer_offsets fully replicated")
        assert offsets_partition_isr

        cluster.kill(coordinator)
        produce(bs, "events", 3, 20, "b")
        # the live member finds the new coordinator and goes on committing there
        wait_until(lambda: first.last_commits() == {0: 60, 1: 60, 2: 60}, 60,
                   "records produced after the kill read and committed")
        new_coordinator = wait_until(lambda: admin.find_coordinator("audit")[0], 30,
                                     "a coordinator")
        assert new_coordinator != coordinator
        cluster.wait_until(lambda: coordinator in cluster.describe().fenced_broker_ids,
                           timeout=30, what=f"broker {coordinator} fenced")
        [listing] = admin.list_groups()  # every live broker asked, the dead one skipped
        assert (listing.group_id, listing.coordinator) == ("audit", new_coordinator)
        assert admin.list_group_offsets("audit") == {
            TopicPartition("events", p): 60 for p in range(3)}

        # a new process in the group starts exactly at the committed offsets
        first.kill()
        produce(bs, "events", 3, 10, "c")
        second = ConsumerProc(bs, "events", "audit", "second")
        procs.append(second)
        wait_until(lambda: len(second.records()) >= 30, 60, "the 30 new records")
        assert sorted(second.records()) == [(p, o) for p in range(3) for o in range(60, 70)]
        check_no_skip_and_bounded_duplicates(procs, {p: 70 for p in range(3)})


def test_two_groups_each_read_every_record(tmp_path: Path) -> None:
    with running_broker(tmp_path / "b", config=GROUP_CONFIG) as broker, \
            Admin(broker.bootstrap) as admin, consumers() as procs:
        bs = broker.bootstrap
        admin.create_topic("news", partitions=4)
        produce(bs, "news", 4, 10, "old")  # before anyone joined: read from the earliest
        procs.extend([ConsumerProc(bs, "news", "search", "s1"),
                      ConsumerProc(bs, "news", "search", "s2"),
                      ConsumerProc(bs, "news", "archive", "a1")])
        wait_until(lambda: stable_group(admin, "search", 2) and stable_group(admin, "archive", 1)
                   and len(procs[0].assignment() or ()) == 2
                   and len(procs[1].assignment() or ()) == 2, 60, "both groups Stable")
        produce(bs, "news", 4, 15, "new")
        expected = {(p, o) for p in range(4) for o in range(25)}
        wait_until(lambda: set(procs[0].records()) | set(procs[1].records()) == expected
                   and set(procs[2].records()) == expected, 60, "both groups read all 100")
        assert procs[0].records() and procs[1].records(), "both members of search read"
        listed = {g.group_id for g in admin.list_groups()}
        assert {"search", "archive"} <= listed


def test_static_member_restart_within_the_session_causes_no_rebalance(tmp_path: Path) -> None:
    with running_broker(tmp_path / "b", config=GROUP_CONFIG) as broker, \
            Admin(broker.bootstrap) as admin, consumers() as procs:
        bs = broker.bootstrap
        admin.create_topic("jobs", partitions=4)
        static = ConsumerProc(bs, "jobs", "workers", "static", instance="worker-1",
                              session_ms=10_000)
        dynamic = ConsumerProc(bs, "jobs", "workers", "dynamic", session_ms=10_000)
        procs.extend([static, dynamic])
        before = wait_until(lambda: stable_group(admin, "workers", 2), 60, "2 members Stable")
        wait_until(lambda: len(static.assignment() or ()) == 2
                   and len(dynamic.assignment() or ()) == 2, 30, "2 partitions each")
        dynamic_owned = dynamic.assignment()
        static_owned = static.assignment()
        dynamic_events = len([e for e in dynamic.snapshot()
                              if e["event"] in ("assigned", "revoked", "lost")])

        static.kill()
        restarted = ConsumerProc(bs, "jobs", "workers", "static-again", instance="worker-1",
                                 session_ms=10_000)
        procs.append(restarted)
        wait_until(lambda: restarted.assignment() is not None, 30, "the restarted member "
                   "gets its assignment")
        assert restarted.assignment() == static_owned
        time.sleep(11)  # past the old session: a late expiry would rebalance now
        after = admin.describe_group("workers")
        assert after.state == "Stable" and after.generation == before.generation
        assert sorted(m.group_instance_id or "" for m in after.members) == ["", "worker-1"]
        assert dynamic.assignment() == dynamic_owned
        assert len([e for e in dynamic.snapshot()
                    if e["event"] in ("assigned", "revoked", "lost")]) == dynamic_events


def strom(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("STROM_BOOTSTRAP_SERVERS",
                                                            "STROM_DEBUG")}
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def test_group_cli_against_a_real_broker(tmp_path: Path) -> None:
    with running_broker(tmp_path / "b", config=GROUP_CONFIG) as broker, \
            Admin(broker.bootstrap) as admin:
        bs = ("--bootstrap-server", broker.bootstrap)
        admin.create_topic("t", partitions=2)
        produce(broker.bootstrap, "t", 2, 5, "x")
        consumer = Consumer(broker.bootstrap, group_id="g", client_id="cli-test",
                            enable_auto_commit=False, auto_offset_reset="earliest",
                            session_timeout_ms=SESSION_MS)
        try:
            consumer.subscribe(["t"])
            got = 0
            deadline = time.monotonic() + 60
            while got < 10 and time.monotonic() < deadline:
                got += len(consumer.poll(timeout_ms=200))
            assert got == 10
            consumer.commit()

            r = strom("group", "describe", "g", *bs)
            assert r.returncode == 0, r.stderr
            lines = [line.split() for line in r.stdout.splitlines()]
            assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
            assert [(row[1], row[2], row[3], row[4], row[5], row[8]) for row in lines[1:]] == [
                ("t", "0", "5", "5", "0", "cli-test"), ("t", "1", "5", "5", "0", "cli-test")]
            r = strom("group", "describe", "g", "--members", "-o", "json", *bs)
            [member] = json.loads(r.stdout)
            assert member["client_id"] == "cli-test" and member["partitions"] == 2

            r = strom("group", "reset-offsets", "g", "--topic", "t", "--to-earliest",
                      "--execute", *bs)
            assert r.returncode == 1 and r.stdout == ""
            assert "NON_EMPTY_GROUP" in r.stderr and "strom group describe g" in r.stderr
        finally:
            consumer.close()

        wait_until(lambda: admin.describe_group("g").state == "Empty", 30, "group g Empty")
        r = strom("group", "list", "-o", "json", *bs)
        assert {"group": "g", "state": "Empty"}.items() <= json.loads(r.stdout)[0].items()

        r = strom("group", "reset-offsets", "g", "--topic", "t", "--to-earliest", *bs)
        assert r.returncode == 0, r.stderr
        assert [line.split()[-1] for line in r.stdout.splitlines()[1:]] == ["0", "0"]
        assert "Dry run" in r.stderr
        assert admin.list_group_offsets("g") == {TopicPartition("t", 0): 5,
                                                 TopicPartition("t", 1): 5}

        r = strom("group", "reset-offsets", "g", "--topic", "t:1", "--shift-by", "-2",
                  "--execute", *bs)
        assert r.returncode == 0, r.stderr
        r = strom("group", "reset-offsets", "g", "--topic", "t:0", "--to-datetime",
                  "1970-01-01T00:00:00Z", "--execute", *bs)
        assert r.returncode == 0, r.stderr
        assert admin.list_group_offsets("g") == {TopicPartition("t", 0): 0,
                                                 TopicPartition("t", 1): 3}
        r = strom("group", "describe", "g", "-o", "json", *bs)
        assert [(row["partition"], row["lag"]) for row in json.loads(r.stdout)] == [(0, 5), (1, 2)]

        r = strom("group", "delete", "g", *bs)
        assert r.returncode == 0, r.stderr
        assert "g" not in {g.group_id for g in admin.list_groups()}
        r = strom("group", "describe", "g", *bs)
        assert r.returncode == 1 and "does not exist" in r.stderr
