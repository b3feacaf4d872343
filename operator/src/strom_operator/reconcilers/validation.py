"""StromTopic and StromConsumerGroup, for now: validate the spec and say so in the status.

Creating topics, growing partitions, reading lag and resetting offsets go through the Strom Admin
API, which the operator does not call yet. Until then these steps make bad specs visible
(``Ready=False, reason=InvalidSpec`` or ``InvalidChange`` with every field named) and report a valid
spec as accepted but not yet applied (``reason=AdminApiPending``), with ``observedGeneration``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom_operator.model import conditions
from strom_operator.model.errors import SpecError
from strom_operator.model.specs import (
    API_VERSION,
    check_transition,
    parse_consumer_group,
    parse_topic,
)
from strom_operator.reconcilers.cluster import ReconcileError
from strom_operator.reconcilers.kube import KubeApi

PARSERS: dict[str, Callable[[Any], Any]] = {
    "StromTopic": parse_topic,
    "StromConsumerGroup": parse_consumer_group,
}


def reconcile(
    api: KubeApi, kind: str, body: dict[str, Any], old_spec: dict[str, Any] | None
) -> None:
    meta = body.get("metadata", {})
    namespace, name = meta.get("namespace") or "default", meta["name"]
    generation = meta.get("generation")
    conds = list((body.get("status") or {}).get("conditions") or [])

    def write(status: conditions.Status, reason: str, message: str) -> None:
        new = conditions.set_condition(
            conds, conditions.READY, status, reason, message, observed_generation=generation
        )
        patch: dict[str, Any] = {"conditions": new}
        if generation is not None:
            patch["observedGeneration"] = generation
        api.patch_status(API_VERSION, kind, namespace, name, patch)

    parse = PARSERS[kind]
    try:
        spec = parse(body.get("spec"))
        if old_spec:
            try:
                old = parse(old_spec)
            except SpecError:
                old = None
            problems = check_transition(spec, old) if old is not None else []
            if problems:
                raise ReconcileError(
                    "validate", "InvalidChange", "; ".join(str(p) for p in problems), permanent=True
                )
    except SpecError as err:
        write("False", "InvalidSpec", str(err))
        raise ReconcileError("validate", "InvalidSpec", str(err), permanent=True) from err
    except ReconcileError as err:
        write("False", err.reason, str(err))
        raise
    cluster = api.get(API_VERSION, "StromCluster", namespace, spec.cluster_ref.name)
    if cluster is None:
        message = f"StromCluster {spec.cluster_ref.name} not found in namespace {namespace}"
        write("False", "ClusterNotFound", message)
        raise ReconcileError("cluster", "ClusterNotFound", message)
    write(
        "False",
        "AdminApiPending",
        "spec is valid; applying it needs the Strom Admin API, which the operator does not "
        "call yet",
    )
