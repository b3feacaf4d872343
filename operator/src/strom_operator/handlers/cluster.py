"""StromCluster handlers: create/update/resume and a periodic timer reconcile; delete cleans up.

Errors from the reconciler become kopf retries with exponential backoff (5 s doubling to 5 min);
an invalid spec becomes a permanent error (no retries until the spec changes).  The reconciler has
already written the reason into ``status.conditions``; the events are posted here.
"""

from __future__ import annotations

import functools
from typing import Any

import kopf

from strom_operator.handlers import metrics
from strom_operator.reconcilers import cluster as reconciler
from strom_operator.reconcilers.admin import AdminClusterAdmin, operator_identity_from_env
from strom_operator.reconcilers.kube import KubernetesApi
from strom_operator.reconcilers.probes import tcp_probe

GROUP, VERSION, PLURAL = "strom.dev", "v1alpha1", "stromclusters"
MAX_DELAY = 300.0


@functools.cache
def default_admin() -> AdminClusterAdmin:
    """The Admin API client every handler uses (settings from the environment, see
    :mod:`strom_operator.reconcilers.admin`)."""
    return AdminClusterAdmin.from_env()


def cluster_reconciler() -> reconciler.ClusterReconciler:
    return reconciler.ClusterReconciler(KubernetesApi(), default_admin(),
                                        operator=operator_identity_from_env(), probe=tcp_probe)


def backoff(retry: int) -> float:
    """5 s, 10 s, 20 s, ... capped at 5 minutes."""
    return float(min(MAX_DELAY, 5.0 * 2 ** min(retry, 16)))


def _post(body: kopf.Body, events: list[reconciler.Event]) -> None:
    for event in events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1000])


def run(body: kopf.Body, old_spec: dict[str, Any] | None, retry: int) -> None:
    raw = dict(body)
    try:
        with metrics.RECONCILE_SECONDS.labels("StromCluster").time():
            outcome = cluster_reconciler().reconcile(raw, old_spec)
    except reconciler.ReconcileError as err:
        result = "invalid" if err.permanent else "error"
        metrics.RECONCILE_TOTAL.labels("StromCluster", result).inc()
        if err.permanent:
            kopf.warn(body, reason=err.reason, message=str(err)[:1000])
            raise kopf.PermanentError(str(err)) from err
        kopf.warn(body, reason=err.reason, message=f"{err} (retry in {backoff(retry):.0f}s)")
        raise kopf.TemporaryError(str(err), delay=backoff(retry)) from err
    metrics.RECONCILE_TOTAL.labels("StromCluster", "ok").inc()
    # The reconcile's status patch merges into the stored status: read both, newest last.
    status = {**dict(raw.get("status") or {}), **outcome.status}
    metrics.record_cluster_status(body.metadata.namespace or "", body.metadata.name or "", status)
    _post(body, outcome.events)


@kopf.on.create(GROUP, VERSION, PLURAL)
def on_create(body: kopf.Body, retry: int, **_: Any) -> None:
    run(body, None, retry)


@kopf.on.update(GROUP, VERSION, PLURAL)
def on_update(body: kopf.Body, old: kopf.BodyEssence | Any, retry: int, **_: Any) -> None:
    old_spec = dict(old.get("spec") or {}) if isinstance(old, dict) else None
    run(body, old_spec, retry)


@kopf.on.resume(GROUP, VERSION, PLURAL)
def on_resume(body: kopf.Body, retry: int, **_: Any) -> None:
    run(body, None, retry)


@kopf.timer(GROUP, VERSION, PLURAL, interval=15.0, initial_delay=15.0, idle=10.0)
def periodic(body: kopf.Body, **_: Any) -> None:
    """Progress that needs no spec change: rolls, drains, rebalances, waiting for brokers."""
    try:
        outcome = cluster_reconciler().reconcile(dict(body))
    except reconciler.ReconcileError:
        return  # the status says why; the change handlers own the retries
    # Rebalances, drains and brokers coming up progress here, between spec changes: the gauges
    # must follow them, not only the change handlers.
    status = {**dict(body.get("status") or {}), **outcome.status}
    metrics.record_cluster_status(body.metadata.namespace or "", body.metadata.name or "", status)
    _post(body, outcome.events)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def on_delete(body: kopf.Body, **_: Any) -> None:
    reconciler.cleanup(KubernetesApi(), dict(body))
