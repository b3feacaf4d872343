"""The part StromTopic and StromConsumerGroup reconciles share: validate, find the cluster, write
status.

:func:`check` parses the spec and the transition rules (every bad field named in
``Ready=False, reason=InvalidSpec|InvalidChange``, a permanent error), then finds the referenced
StromCluster (``ClusterNotFound``, retried: it may be created later) and parses its spec so the
Admin API address can be derived.  :func:`write` patches the status with ``observedGeneration``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NoReturn

from strom_operator.model import conditions
from strom_operator.model.conditions import Status
from strom_operator.model.errors import SpecError
from strom_operator.model.manifests import ClusterRef
from strom_operator.model.specs import (
    API_VERSION,
    StromClusterSpec,
    check_transition,
    parse_cluster,
    parse_consumer_group,
    parse_topic,
)
from strom_operator.reconcilers.cluster import ReconcileError, ref_of
from strom_operator.reconcilers.kube import KubeApi

PARSERS: dict[str, Callable[[Any], Any]] = {
    "StromTopic": parse_topic,
    "StromConsumerGroup": parse_consumer_group,
}


@dataclasses.dataclass
class Resource:
    """One StromTopic/StromConsumerGroup being reconciled, with its conditions as they evolve."""

    api: KubeApi
    kind: str
    body: dict[str, Any]
    conditions: list[dict[str, Any]]

    @property
    def namespace(self) -> str:
        return str(self.body.get("metadata", {}).get("namespace") or "default")

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def generation(self) -> int | None:
        gen = self.body.get("metadata", {}).get("generation")
        return int(gen) if gen is not None else None

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.body.get("status") or {})

    def condition(self, type: str, status: Status, reason: str, message: str) -> None:
        self.conditions = conditions.set_condition(
            self.conditions, type, status, reason, message, observed_generation=self.generation
        )

    def write(self, fields: dict[str, Any] | None = None) -> dict[str, Any]:
        patch: dict[str, Any] = {**(fields or {}), "conditions": self.conditions}
        if self.generation is not None:
            patch["observedGeneration"] = self.generation
        self.api.patch_status(API_VERSION, self.kind, self.namespace, self.name, patch)
        return patch

    def fail(self, step: str, reason: str, message: str, *, permanent: bool = False) -> NoReturn:
        """Write ``Ready=False`` with the reason, then raise it as a :class:`ReconcileError`."""
        self.condition(conditions.READY, "False", reason, message)
        self.write()
        raise ReconcileError(step, reason, message, permanent=permanent)


@dataclasses.dataclass(frozen=True)
class Checked:
    resource: Resource
    spec: Any
    cluster_ref: ClusterRef
    cluster_spec: StromClusterSpec


def check(
    api: KubeApi, kind: str, body: dict[str, Any], old_spec: dict[str, Any] | None
) -> Checked:
    res = Resource(api, kind, body, list((body.get("status") or {}).get("conditions") or []))
    parse = PARSERS[kind]
    try:
        spec = parse(body.get("spec"))
    except SpecError as err:
        res.fail("validate", "InvalidSpec", str(err), permanent=True)
    if old_spec:
        try:
            old = parse(old_spec)
        except SpecError:
            old = None
        problems = check_transition(spec, old) if old is not None else []
        if problems:
            res.fail(
                "validate", "InvalidChange", "; ".join(str(p) for p in problems), permanent=True
            )
    cluster = api.get(API_VERSION, "StromCluster", res.namespace, spec.cluster_ref.name)
    if cluster is None:
        res.fail(
            "cluster",
            "ClusterNotFound",
            f"StromCluster {spec.cluster_ref.name} not found in namespace {res.namespace}",
        )
    try:
        cluster_spec = parse_cluster(cluster.get("spec"))
    except SpecError as err:
        res.fail("cluster", "ClusterInvalid", f"StromCluster {spec.cluster_ref.name}: {err}")
    return Checked(res, spec, ref_of(cluster), cluster_spec)
