"""The cluster's Admin API as the reconcilers need it, and its real implementation.

The reconcilers see three small protocols (:class:`ClusterAdmin`, :class:`TopicAdmin`,
:class:`GroupAdmin`) so their tests use fakes; :class:`AdminClusterAdmin` implements all three with
``strom.client.Admin``, opened per call against the cluster's bootstrap Service
(``<name>-bootstrap.<ns>.svc:<port>``) with a bounded request timeout.

Reads answer None ("unknown") when the cluster can not be reached, with the reason in
``last_error``: the cluster reconcile then acts on Kubernetes state alone and never crashes.
Writes (and the topic/group reads) raise :class:`AdminError`, which the reconcilers turn into a
retry.

``STROM_OPERATOR_BOOTSTRAP_OVERRIDE`` points the operator elsewhere (development, tests with local
brokers): either one ``host:port[,host:port]`` for every cluster, or a JSON object mapping
``"<namespace>/<name>"`` (or ``"*"``) to such an address.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from strom.client import Admin
from strom.protocol.errors import ErrorCode, StromError
from strom_operator.model import manifests
from strom_operator.model.cluster_state import ClusterState, Moving, PartitionInfo, build_state
from strom_operator.model.groups import GroupView, PartitionLag
from strom_operator.model.manifests import ClusterRef
from strom_operator.model.specs import StromClusterSpec
from strom_operator.model.topics import LiveTopic, TopicView

log = logging.getLogger(__name__)

OVERRIDE_ENV = "STROM_OPERATOR_BOOTSTRAP_OVERRIDE"
TIMEOUT_ENV = "STROM_OPERATOR_ADMIN_TIMEOUT_MS"
THROTTLE_ENV = "STROM_OPERATOR_REBALANCE_THROTTLE"
#: Replication throttle while the operator moves partitions (bytes/s; 0 = unthrottled).
DEFAULT_THROTTLE_BYTES_PER_SEC = 50 * 1024 * 1024
DEFAULT_TIMEOUT_MS = 5000

TopicPartition = tuple[str, int]


class AdminError(Exception):
    """The cluster's Admin API could not do what was asked (unreachable, or it refused); the
    message names the address and the broker's answer."""


class ClusterAdmin(Protocol):
    @property
    def last_error(self) -> str | None: ...

    def describe(self, ref: ClusterRef, spec: StromClusterSpec) -> ClusterState | None: ...

    def reassign(
        self,
        ref: ClusterRef,
        spec: StromClusterSpec,
        targets: Mapping[TopicPartition, Sequence[int]],
        throttle_bytes_per_sec: int,
    ) -> None: ...

    def elect_preferred(
        self, ref: ClusterRef, spec: StromClusterSpec, partitions: Sequence[TopicPartition]
    ) -> None: ...

    def clear_throttle(self, ref: ClusterRef, spec: StromClusterSpec) -> None: ...

    def unregister(self, ref: ClusterRef, spec: StromClusterSpec,
                   broker_ids: Sequence[int]) -> None: ...


class TopicAdmin(Protocol):
    def topic(self, ref: ClusterRef, spec: StromClusterSpec, name: str) -> TopicView: ...

    def create_topic(
        self,
        ref: ClusterRef,
        spec: StromClusterSpec,
        name: str,
        partitions: int,
        replication_factor: int,
        config: Mapping[str, str],
    ) -> None: ...

    def grow_partitions(
        self, ref: ClusterRef, spec: StromClusterSpec, name: str, total: int
    ) -> None: ...

    def alter_config(
        self,
        ref: ClusterRef,
        spec: StromClusterSpec,
        name: str,
        set: Mapping[str, str],
        delete: Sequence[str],
    ) -> None: ...

    def reassign(
        self,
        ref: ClusterRef,
        spec: StromClusterSpec,
        targets: Mapping[TopicPartition, Sequence[int]],
        throttle_bytes_per_sec: int,
    ) -> None: ...

    def delete_topic(self, ref: ClusterRef, spec: StromClusterSpec, name: str) -> None: ...


class GroupAdmin(Protocol):
    def group(
        self, ref: ClusterRef, spec: StromClusterSpec, group_id: str, topics: Sequence[str]
    ) -> GroupView: ...

    def reset_offsets(
        self,
        ref: ClusterRef,
        spec: StromClusterSpec,
        group_id: str,
        topics: Sequence[str],
        target: tuple[str, int],
    ) -> None: ...


class NoAdmin:
    """The cluster's own state is unknown (no Admin API client configured)."""

    last_error: str | None = "no Admin API client configured"

    def describe(self, ref: ClusterRef, spec: StromClusterSpec) -> ClusterState | None:
        return None

    def reassign(
        self,
        ref: ClusterRef,
        spec: StromClusterSpec,
        targets: Mapping[TopicPartition, Sequence[int]],
        throttle_bytes_per_sec: int,
    ) -> None:
        raise AdminError("no Admin API client configured")

    def elect_preferred(
        self, ref: ClusterRef, spec: StromClusterSpec, partitions: Sequence[TopicPartition]
    ) -> None:
        raise AdminError("no Admin API client configured")

    def clear_throttle(self, ref: ClusterRef, spec: StromClusterSpec) -> None:
        raise AdminError("no Admin API client configured")

    def unregister(self, ref: ClusterRef, spec: StromClusterSpec,
                   broker_ids: Sequence[int]) -> None:
        raise AdminError("no Admin API client configured")


# -- configuration (pure) -------------------------------------------------------------------


def parse_overrides(text: str | None) -> dict[str, str]:
    """``host:port,...`` (for every cluster, key ``*``) or a JSON object ``{"ns/name": addr}``."""
    if not text or not text.strip():
        return {}
    raw = text.strip()
    if raw.startswith("{"):
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(f"{OVERRIDE_ENV} must be a JSON object or host:port list")
        return {str(k): str(v) for k, v in data.items()}
    return {"*": raw}


def resolve_bootstrap(ref: ClusterRef, spec: StromClusterSpec, overrides: Mapping[str, str]) -> str:
    """The address the operator dials: an override, else the bootstrap Service."""
    key = f"{ref.namespace}/{ref.name}"
    if key in overrides:
        return overrides[key]
    if "*" in overrides:
        return overrides["*"]
    return manifests.bootstrap_address(ref, spec)


OPERATOR_NAMESPACE_ENV = "STROM_OPERATOR_NAMESPACE"
OPERATOR_POD_LABELS_ENV = "STROM_OPERATOR_POD_LABELS"


def operator_identity_from_env() -> manifests.OperatorIdentity | None:
    """The operator's namespace and pod labels (``k=v,k=v``), which the chart sets; None out of
    a cluster (then a NetworkPolicy has no operator rule and is not probed)."""
    namespace = os.environ.get(OPERATOR_NAMESPACE_ENV, "").strip()
    raw = os.environ.get(OPERATOR_POD_LABELS_ENV, "").strip()
    if not namespace or not raw:
        return None
    pairs = []
    for item in raw.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or not key:
            raise ValueError(f"{OPERATOR_POD_LABELS_ENV}: {item!r} is not key=value")
        pairs.append((key, value))
    return manifests.OperatorIdentity(namespace, tuple(sorted(pairs)))


def throttle_from_env() -> int:
    raw = os.environ.get(THROTTLE_ENV)
    return int(raw) if raw else DEFAULT_THROTTLE_BYTES_PER_SEC


# -- the real client ----------------------------------------------------------------------------

AdminFactory = Callable[[str, int], Any]


def _default_factory(bootstrap: str, timeout_ms: int) -> Admin:
    return Admin(bootstrap, request_timeout_ms=timeout_ms, retry_backoff_max_ms=500)


def _snapshot(admin: Any) -> tuple[Any, Any]:
    """The cluster description and every topic (internal ones included), in that order."""
    return admin.describe_cluster(), admin.describe_topics(None, include_internal=True)


class AdminClusterAdmin:
    """:class:`ClusterAdmin`, :class:`TopicAdmin` and :class:`GroupAdmin` over ``strom.client``."""

    def __init__(
        self,
        overrides: Mapping[str, str] | None = None,
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        factory: AdminFactory = _default_factory,
    ) -> None:
        self.overrides = dict(overrides or {})
        self.timeout_ms = timeout_ms
        self.factory = factory
        self.last_error: str | None = None

    @classmethod
    def from_env(cls) -> AdminClusterAdmin:
        return cls(
            parse_overrides(os.environ.get(OVERRIDE_ENV)),
            timeout_ms=int(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_MS),
        )

    def bootstrap(self, ref: ClusterRef, spec: StromClusterSpec) -> str:
        return resolve_bootstrap(ref, spec, self.overrides)

    @contextlib.contextmanager
    def _session(self, ref: ClusterRef, spec: StromClusterSpec) -> Iterator[Any]:
        """An Admin client for one reconcile step.  Every failure inside becomes
        :class:`AdminError` naming the address: this is the boundary to the network, and a
        reconcile must report a broken cluster, not crash on it."""
        address = self.bootstrap(ref, spec)
        admin: Any = None
        try:
            admin = self.factory(address, self.timeout_ms)
            yield admin
        except AdminError:
            raise
        except StromError as err:
            raise AdminError(f"Admin API at {address}: {err}") from err
        except Exception as err:
            raise AdminError(f"Admin API at {address}: {err!r}") from err
        finally:
            if admin is not None:
                with contextlib.suppress(Exception):
                    admin.close()

    # -- ClusterAdmin ---------------------------------------------------------------------------

    def describe(self, ref: ClusterRef, spec: StromClusterSpec) -> ClusterState | None:
        try:
            with self._session(ref, spec) as admin:
                cluster, described = _snapshot(admin)
                moving = admin.list_partition_reassignments()
        except AdminError as err:
            self.last_error = str(err)
            log.info("cluster %s/%s unknown: %s", ref.namespace, ref.name, err)
            return None
        self.last_error = None
        return build_state(
            brokers={b.broker_id: b.rack for b in cluster.brokers},
            fenced=cluster.fenced_broker_ids,
            controller=cluster.controller_id,
            partitions=[
                PartitionInfo(t.name, p.partition, tuple(p.replicas), tuple(p.isr), p.leader)
                for t in described
                for p in t.partitions
            ],
            moving=[
                Moving(m.topic, m.partition, m.percent_done, tuple(m.removing)) for m in moving
            ],
            topics=[t.name for t in described if not t.internal],
        )

    def reassign(
        self,
        ref: ClusterRef,
        spec: StromClusterSpec,
        targets: Mapping[TopicPartition, Sequence[int]],
        throttle_bytes_per_sec: int,
    ) -> None:
        """``throttle_bytes_per_sec`` as the Admin API takes it: N > 0 sets the cluster's
        replication throttle, 0 keeps it, -1 removes it."""
        with self._session(ref, spec) as admin:
            admin.alter_partition_reassignments(
                {tp: list(r) for tp, r in targets.items()},
                throttle_bytes_per_sec=throttle_bytes_per_sec,
            )

    def elect_preferred(
        self, ref: ClusterRef, spec: StromClusterSpec, partitions: Sequence[TopicPartition]
    ) -> None:
        if not partitions:
            return
        with self._session(ref, spec) as admin:
            # Per-partition errors (e.g. the preferred replica not in the ISR yet) are retried by
            # the next reconcile, which sees the leaders again.
            admin.elect_leaders(list(partitions), "preferred", raise_on_error=False)

    def clear_throttle(self, ref: ClusterRef, spec: StromClusterSpec) -> None:
        with self._session(ref, spec) as admin:
            admin.set_replication_throttle(None)

    def unregister(self, ref: ClusterRef, spec: StromClusterSpec,
                   broker_ids: Sequence[int]) -> None:
        with self._session(ref, spec) as admin:
            for broker_id in broker_ids:
                admin.unregister_broker(broker_id)

    # -- TopicAdmin -----------------------------------------------------------------------------

    def topic(self, ref: ClusterRef, spec: StromClusterSpec, name: str) -> TopicView:
        with self._session(ref, spec) as admin:
            cluster, described = _snapshot(admin)
            moving = (
                admin.list_partition_reassignments([name])
                if any(t.name == name for t in described)
                else []
            )
        fenced = set(cluster.fenced_broker_ids)
        racks = {b.broker_id: b.rack for b in cluster.brokers if b.broker_id not in fenced}
        loads = dict.fromkeys(racks, 0)
        live: LiveTopic | None = None
        for t in described:
            for p in t.partitions:
                for b in p.replicas:
                    loads[b] = loads.get(b, 0) + 1
            if t.name == name:
                live = LiveTopic(
                    name=name,
                    assignment={p.partition: list(p.replicas) for p in t.partitions},
                    config={str(k): str(v) for k, v in t.configs.items()},
                )
        return TopicView(live, racks, loads, moving=bool(moving))

    def create_topic(
        self,
        ref: ClusterRef,
        spec: StromClusterSpec,
        name: str,
        partitions: int,
        replication_factor: int,
        config: Mapping[str, str],
    ) -> None:
        with self._session(ref, spec) as admin:
            admin.create_topic(name, partitions, replication_factor, dict(config))

    def grow_partitions(
        self, ref: ClusterRef, spec: StromClusterSpec, name: str, total: int
    ) -> None:
        with self._session(ref, spec) as admin:
            admin.create_partitions(name, total)

    def alter_config(
        self,
        ref: ClusterRef,
        spec: StromClusterSpec,
        name: str,
        set: Mapping[str, str],
        delete: Sequence[str],
    ) -> None:
        with self._session(ref, spec) as admin:
            admin.alter_configs(name, set=dict(set), delete=list(delete))

    def delete_topic(self, ref: ClusterRef, spec: StromClusterSpec, name: str) -> None:
        with self._session(ref, spec) as admin:
            result = admin.delete_topics([name], raise_on_error=False)
        err = result.get(name)
        if err is not None and err.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise AdminError(f"deleting topic {name}: {err}")

    # -- GroupAdmin -----------------------------------------------------------------------------

    def group(
        self, ref: ClusterRef, spec: StromClusterSpec, group_id: str, topics: Sequence[str]
    ) -> GroupView:
        with self._session(ref, spec) as admin:
            description = admin.describe_group(group_id)
            lags = admin.group_lag(group_id)
            wanted = set(topics)
            described = [t for t in admin.describe_topics(None) if t.name in wanted]
        return GroupView(
            state=str(description.state),
            members=len(description.members),
            lags=tuple(  # lag as strom.model.lag defines it; None: the topic is gone
                PartitionLag(r.topic, r.partition, r.committed, r.log_end_offset, r.lag)
                for r in lags
                if r.lag is not None
            ),
            partitions=sum(len(t.partitions) for t in described),
        )

    def reset_offsets(
        self,
        ref: ClusterRef,
        spec: StromClusterSpec,
        group_id: str,
        topics: Sequence[str],
        target: tuple[str, int],
    ) -> None:
        from strom.client.models import OffsetReset

        kind, value = target
        with self._session(ref, spec) as admin:
            admin.reset_group_offsets(group_id, list(topics), OffsetReset(kind, value))
