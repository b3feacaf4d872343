"""An in-memory cluster behind the ClusterAdmin / TopicAdmin / GroupAdmin protocols.

Reassignments stay "in flight" (replicas = old + new, as Kafka reports them) until the test calls
:meth:`FakeCluster.finish`; every call is recorded in ``calls``.
"""

from __future__ import annotations

from strom_operator.model.cluster_state import Moving, PartitionInfo, build_state
from strom_operator.model.groups import GroupView
from strom_operator.model.topics import LiveTopic, TopicView
from strom_operator.reconcilers.admin import AdminError


class FakeCluster:
    def __init__(self, brokers, assignment=None, *, racks=None, controller=0):
        self.brokers = list(brokers)
        self.racks = dict(racks or {})
        self.fenced: set[int] = set()
        self.assignment = {tp: list(r) for tp, r in (assignment or {}).items()}
        self.leaders = {tp: r[0] for tp, r in self.assignment.items()}
        self.controller = controller
        self.moving: dict[tuple[str, int], list[int]] = {}
        self.percent: float | None = 40.0
        self.out_of_isr: set[tuple[str, int]] = set()
        self.configs: dict[str, dict[str, str]] = {}
        self.throttle: int | None = None
        self.reachable = True
        self.last_error: str | None = None
        self.calls: list[tuple] = []
        self.group_view = GroupView("Empty", 0, (), 0)
        self.resets: list[tuple] = []

    # -- helpers for tests --------------------------------------------------------------------

    def finish(self):
        for tp, target in self.moving.items():
            self.assignment[tp] = list(target)
            if self.leaders.get(tp) not in target:
                self.leaders[tp] = target[0]
        self.moving.clear()

    def load(self):
        out = dict.fromkeys(self.brokers, 0)
        for r in self.assignment.values():
            for b in r:
                out[b] = out.get(b, 0) + 1
        return out

    def _check(self):
        if not self.reachable:
            raise AdminError("Admin API at c-bootstrap.ns.svc:9092: NETWORK_EXCEPTION")

    def _replicas(self, tp):
        current = self.assignment[tp]
        if tp in self.moving:
            return current + [b for b in self.moving[tp] if b not in current]
        return current

    # -- ClusterAdmin ---------------------------------------------------------------------------

    def describe(self, ref, spec):
        if not self.reachable:
            self.last_error = "Admin API at c-bootstrap.ns.svc:9092: NETWORK_EXCEPTION"
            return None
        self.last_error = None
        parts = []
        for (t, p), _ in sorted(self.assignment.items()):
            replicas = tuple(self._replicas((t, p)))
            isr = tuple(b for b in replicas if (t, p) not in self.out_of_isr or b != replicas[-1])
            parts.append(PartitionInfo(t, p, replicas, isr, self.leaders.get((t, p), -1)))
        return build_state(
            brokers={b: self.racks.get(b) for b in self.brokers},
            fenced=self.fenced,
            controller=self.controller,
            partitions=parts,
            moving=[
                Moving(t, p, self.percent, tuple(set(self.assignment[(t, p)]) - set(target)))
                for (t, p), target in sorted(self.moving.items())
            ],
            topics={t for (t, _) in self.assignment} | set(self.configs),
        )

    def reassign(self, ref, spec, targets, throttle_bytes_per_sec):
        self._check()
        self.calls.append(("reassign", dict(targets), throttle_bytes_per_sec))
        for tp, target in targets.items():
            self.moving[tp] = list(target)
        if throttle_bytes_per_sec > 0:
            self.throttle = throttle_bytes_per_sec
        elif throttle_bytes_per_sec < 0:
            self.throttle = None

    def elect_preferred(self, ref, spec, partitions):
        self._check()
        self.calls.append(("elect", list(partitions)))
        for tp in partitions:
            self.leaders[tp] = self.assignment[tp][0]

    def clear_throttle(self, ref, spec):
        self._check()
        self.calls.append(("clear_throttle",))
        self.throttle = None

    def unregister(self, ref, spec, broker_ids):
        self._check()
        self.calls.append(("unregister", list(broker_ids)))
        for b in broker_ids:
            self.fenced.discard(b)
            if b in self.brokers:
                self.brokers.remove(b)

    # -- TopicAdmin -----------------------------------------------------------------------------

    def topic(self, ref, spec, name):
        self._check()
        parts = {p: list(self._replicas((t, p))) for (t, p) in self.assignment if t == name}
        live = LiveTopic(name, parts, dict(self.configs.get(name, {}))) if parts else None
        racks = {b: self.racks.get(b) for b in self.brokers if b not in self.fenced}
        return TopicView(live, racks, self.load(), moving=any(t == name for t, _ in self.moving))

    def create_topic(self, ref, spec, name, partitions, replication_factor, config):
        self._check()
        self.calls.append(("create", name, partitions, replication_factor, dict(config)))
        n = len(self.brokers)
        for p in range(partitions):
            replicas = [self.brokers[(p + k) % n] for k in range(replication_factor)]
            self.assignment[(name, p)] = replicas
            self.leaders[(name, p)] = replicas[0]
        self.configs[name] = dict(config)

    def grow_partitions(self, ref, spec, name, total):
        self._check()
        self.calls.append(("grow", name, total))
        have = sorted(p for (t, p) in self.assignment if t == name)
        rf = len(self.assignment[(name, have[0])])
        n = len(self.brokers)
        for p in range(len(have), total):
            self.assignment[(name, p)] = [self.brokers[(p + k) % n] for k in range(rf)]
            self.leaders[(name, p)] = self.assignment[(name, p)][0]

    def alter_config(self, ref, spec, name, set, delete):
        self._check()
        self.calls.append(("config", name, dict(set), list(delete)))
        cfg = self.configs.setdefault(name, {})
        cfg.update(set)
        for key in delete:
            cfg.pop(key, None)

    def delete_topic(self, ref, spec, name):
        self._check()
        self.calls.append(("delete", name))
        for tp in [tp for tp in self.assignment if tp[0] == name]:
            del self.assignment[tp]
        self.configs.pop(name, None)

    # -- GroupAdmin -----------------------------------------------------------------------------

    def group(self, ref, spec, group_id, topics):
        self._check()
        self.calls.append(("group", group_id))
        return self.group_view

    def reset_offsets(self, ref, spec, group_id, topics, target):
        self._check()
        self.resets.append((group_id, list(topics), target))
