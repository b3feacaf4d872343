"""Controller and Raft health as Prometheus metrics (Kafka's ``raft-metrics`` and
``KafkaController`` / ``ControllerStats`` groups), read at scrape time from the broker's Raft
member and, on the active controller, from the metadata image.

Every broker runs a Raft member (voters vote, observers replicate), so each exports its view of
the quorum: who leads (``strom_raft_current_leader``, -1 when unknown), the term, its role, its
metadata log end, the commit index it knows (``strom_raft_high_watermark``) and how far it has
applied (``strom_raft_applied_offset``); ``max(high_watermark) - applied_offset`` is a broker's
metadata commit lag. The cluster-wide counts (brokers by state, topics, partitions, offline and
reassigning partitions, partitions not led by their preferred replica) are exported by the
active controller only, as Kafka's ``ActiveControllerCount`` gate does, so a sum over all brokers
counts the cluster once and no dashboard double-counts during an election.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from strom.controller.active import ActiveController
from strom.controller.driver import QuorumDriver
from strom.controller.metadata import NO_LEADER, MetadataImage
from strom.controller.raft import Role

ROLES = (*(role.value for role in Role), "observer")


class QuorumSource(Protocol):
    """The broker's cluster link, as the metrics see it."""

    driver: QuorumDriver
    active: ActiveController | None
    is_voter: bool


class QuorumCollector(Collector):
    def __init__(self) -> None:
        self.source: QuorumSource | None = None

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        source = self.source
        if source is None:
            return
        try:
            node = source.driver.node
        except RuntimeError:  # not started yet
            return
        leader = node.leader_id
        yield GaugeMetricFamily("strom_raft_current_leader", "Node id of the metadata quorum's "
                                "leader as this node knows it (-1: none known).",
                                value=-1 if leader is None else leader)
        yield GaugeMetricFamily("strom_raft_current_term", "Raft term (Kafka's epoch) this "
                                "node is in.", value=node.term)
        role = node.role.value if source.is_voter else "observer"
        state = GaugeMetricFamily("strom_raft_state", "1 for this node's Raft role.",
                                  labels=["state"])
        for name in ROLES:
            state.add_metric([name], 1 if name == role else 0)
        yield state
        yield GaugeMetricFamily("strom_raft_log_end_offset", "Index of the last entry in this "
                                "node's metadata log.", value=node.last_index)
        yield GaugeMetricFamily("strom_raft_high_watermark", "Highest metadata log index this "
                                "node knows to be committed.", value=node.commit_index)
        yield GaugeMetricFamily("strom_raft_applied_offset", "Highest metadata log index "
                                "applied to this node's metadata image.",
                                value=node.last_applied)
        active = source.active is not None and source.active.active
        yield GaugeMetricFamily("strom_controller_active", "1 on the active controller, else 0 "
                                "(a healthy cluster sums to 1).", value=1 if active else 0)
        if active:
            yield from _cluster_counts(source.driver.image)


def _cluster_counts(image: MetadataImage) -> Iterator[Metric]:
    brokers = GaugeMetricFamily("strom_controller_brokers", "Registered brokers by state "
                                "(active: unfenced; fenced: registered but not serving).",
                                labels=["state"])
    fenced = sum(1 for b in image.brokers.values() if b.fenced)
    brokers.add_metric(["active"], len(image.brokers) - fenced)
    brokers.add_metric(["fenced"], fenced)
    yield brokers
    partitions = offline = reassigning = imbalance = 0
    for topic in image.topics.values():
        for state in topic.partitions.values():
            partitions += 1
            if state.leader == NO_LEADER:
                offline += 1
            elif state.replicas and state.leader != state.replicas[0]:
                imbalance += 1
            if state.adding_replicas or state.removing_replicas:
                reassigning += 1
    yield GaugeMetricFamily("strom_controller_topics", "Topics in the cluster.",
                            value=len(image.topics))
    yield GaugeMetricFamily("strom_controller_partitions", "Partitions in the cluster.",
                            value=partitions)
    yield GaugeMetricFamily("strom_controller_offline_partitions", "Partitions with no leader "
                            "(Kafka's OfflinePartitionsCount).", value=offline)
    yield GaugeMetricFamily("strom_controller_preferred_replica_imbalance", "Partitions led by "
                            "a replica other than their preferred (first) one.", value=imbalance)
    yield GaugeMetricFamily("strom_controller_reassigning_partitions", "Partitions with a "
                            "reassignment in progress (replicas being added or removed).",
                            value=reassigning)
