"""What to do to make a live topic match its StromTopic: create, grow, reconfigure, re-replicate.

:func:`diff` compares the desired spec with the live topic (None when it does not exist) and returns
a :class:`TopicChanges`: the actions for the Admin API, or a refusal (shrinking partitions), with a
message for the status.  Partitions only grow (Kafka semantics: shrinking loses data and breaks key
ordering).  A replication-factor change becomes a reassignment: replicas are added rack-aware on the
least-loaded brokers, or removed from the end of each list (the preferred leader stays).
Topics that exist in the cluster but have no StromTopic are reported by :func:`unmanaged`, never
deleted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from strom.model.reassign import new_replicas_for_rf
from strom_operator.model.errors import PlanError
from strom_operator.model.fields import config_value_str
from strom_operator.model.specs import StromTopicSpec


@dataclasses.dataclass(frozen=True)
class LiveTopic:
    name: str
    assignment: dict[int, list[int]]  # partition -> replicas
    config: dict[str, str]

    @property
    def partitions(self) -> int:
        return len(self.assignment)

    @property
    def replication_factor(self) -> int:
        return max((len(r) for r in self.assignment.values()), default=0)


@dataclasses.dataclass(frozen=True)
class TopicChanges:
    create: bool = False
    grow_to: int | None = None
    set_config: dict[str, str] = dataclasses.field(default_factory=dict)
    delete_config: tuple[str, ...] = ()
    reassign: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    rejected: str | None = None  # why the spec can not be applied (reason in status)

    @property
    def is_empty(self) -> bool:
        return not (
            self.create
            or self.grow_to
            or self.set_config
            or self.delete_config
            or self.reassign
            or self.rejected
        )


def topic_name(spec: StromTopicSpec, metadata_name: str) -> str:
    return spec.topic_name or metadata_name


def diff(
    spec: StromTopicSpec,
    name: str,
    live: LiveTopic | None,
    racks: Mapping[int, str | None],
    broker_loads: Mapping[int, int] | None = None,
) -> TopicChanges:
    desired_config = {k: config_value_str(v) for k, v in spec.config.items()}
    if spec.replication_factor > len(racks) and racks:
        return TopicChanges(
            rejected=(
                f"spec.replicationFactor {spec.replication_factor} exceeds the "
                f"{len(racks)} broker(s) "
                "of the cluster: lower it or add brokers"
            )
        )
    if live is None:
        return TopicChanges(create=True, set_config=desired_config)
    if spec.partitions < live.partitions:
        return TopicChanges(
            rejected=(
                f"spec.partitions {spec.partitions} is below the topic's "
                f"{live.partitions} partitions; "
                f"partitions can only grow: set spec.partitions back to {live.partitions} or more"
            )
        )
    grow_to = spec.partitions if spec.partitions > live.partitions else None
    set_config = {k: v for k, v in desired_config.items() if live.config.get(k) != v}
    delete_config = tuple(sorted(k for k in live.config if k not in desired_config))
    reassign: dict[int, list[int]] = {}
    if spec.replication_factor != live.replication_factor and racks:
        load = dict(broker_loads) if broker_loads is not None else {}
        try:
            for p, replicas in sorted(live.assignment.items()):
                new = new_replicas_for_rf(replicas, spec.replication_factor, racks, load)
                if new != replicas:
                    reassign[p] = new
                    for b in set(new) - set(replicas):
                        load[b] = load.get(b, 0) + 1
        except PlanError as err:
            return TopicChanges(rejected=str(err))
    return TopicChanges(
        grow_to=grow_to, set_config=set_config, delete_config=delete_config, reassign=reassign
    )


def unmanaged(live_topics: Iterable[str], managed: Iterable[str]) -> list[str]:
    """Topics in the cluster with no StromTopic (internal ``__`` topics excluded): report only."""
    known = set(managed)
    return sorted(t for t in live_topics if t not in known and not t.startswith("__"))


def status_of(live: LiveTopic | None) -> dict[str, object]:
    if live is None:
        return {"partitions": 0, "replicationFactor": 0}
    return {
        "topicName": live.name,
        "partitions": live.partitions,
        "replicationFactor": live.replication_factor,
        "config": dict(sorted(live.config.items())),
    }


def replicas_lists(assignment: Mapping[int, Sequence[int]]) -> list[list[int]]:
    return [list(assignment[p]) for p in sorted(assignment)]


@dataclasses.dataclass(frozen=True)
class TopicView:
    """The topic and what a replication-factor change needs: live brokers, their loads, and
    whether a reassignment of this topic is still running."""

    live: LiveTopic | None
    racks: dict[int, str | None]
    loads: dict[int, int]
    moving: bool = False


def deletion_step(deletion_policy: str, cluster_exists: bool) -> str:
    """``DeleteTopic`` (then release the finalizer) or ``Release`` (the topic stays, or there is
    no cluster left to hold it)."""
    if deletion_policy == "Delete" and cluster_exists:
        return "DeleteTopic"
    return "Release"
