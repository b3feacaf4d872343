"""StromTopic and StromConsumerGroup handlers: thin translations to the reconcilers.

Change handlers (create/update/resume) apply the spec; timers keep the status current and drive
work that needs no spec change (a replication-factor reassignment finishing, lag, autoscaling, an
offset reset waiting for the group to empty).  Deleting a StromTopic runs the deletion policy
before kopf removes its finalizer.
"""

from __future__ import annotations

from typing import Any

import kopf

from strom_operator.handlers import metrics
from strom_operator.handlers.cluster import _post, backoff, default_admin
from strom_operator.reconcilers.cluster import Outcome, ReconcileError
from strom_operator.reconcilers.group import GroupReconciler
from strom_operator.reconcilers.kube import KubernetesApi
from strom_operator.reconcilers.topic import TopicReconciler

GROUP, VERSION = "strom.dev", "v1alpha1"
_RECONCILERS: dict[str, type[TopicReconciler] | type[GroupReconciler]] = {
    "StromTopic": TopicReconciler,
    "StromConsumerGroup": GroupReconciler,
}


def _old_spec(old: Any) -> dict[str, Any] | None:
    return dict(old.get("spec") or {}) if isinstance(old, dict) else None


def _run(kind: str, body: kopf.Body, old: Any, retry: int) -> Outcome:
    api = KubernetesApi()
    try:
        with metrics.RECONCILE_SECONDS.labels(kind).time():
            reconciler = _RECONCILERS[kind](api, default_admin())
            outcome = reconciler.reconcile(dict(body), _old_spec(old))
    except ReconcileError as err:
        metrics.RECONCILE_TOTAL.labels(kind, "invalid" if err.permanent else "error").inc()
        kopf.warn(body, reason=err.reason, message=str(err)[:1000])
        if err.permanent:
            raise kopf.PermanentError(str(err)) from err
        raise kopf.TemporaryError(str(err), delay=backoff(retry)) from err
    metrics.RECONCILE_TOTAL.labels(kind, "ok").inc()
    if kind == "StromConsumerGroup" and "totalLag" in outcome.status:
        metrics.GROUP_LAG.labels(body.metadata.namespace or "", body.metadata.name or "").set(
            float(outcome.status["totalLag"])
        )
    _post(body, outcome.events)
    return outcome


@kopf.on.create(GROUP, VERSION, "stromtopics")
@kopf.on.update(GROUP, VERSION, "stromtopics")
@kopf.on.resume(GROUP, VERSION, "stromtopics")
def topic(body: kopf.Body, retry: int, old: Any = None, **_: Any) -> None:
    _run("StromTopic", body, old, retry)


@kopf.timer(GROUP, VERSION, "stromtopics", interval=30.0, initial_delay=30.0, idle=10.0)
def topic_periodic(body: kopf.Body, **_: Any) -> None:
    try:
        _run("StromTopic", body, None, 0)
    except (kopf.PermanentError, kopf.TemporaryError):
        return  # the status says why; the change handlers own the retries


@kopf.on.delete(GROUP, VERSION, "stromtopics")
def topic_deleted(body: kopf.Body, retry: int, **_: Any) -> None:
    try:
        events = TopicReconciler(KubernetesApi(), default_admin()).delete(dict(body))
    except ReconcileError as err:
        kopf.warn(body, reason=err.reason, message=str(err)[:1000])
        raise kopf.TemporaryError(str(err), delay=backoff(retry)) from err
    _post(body, events)


@kopf.on.create(GROUP, VERSION, "stromconsumergroups")
@kopf.on.update(GROUP, VERSION, "stromconsumergroups")
@kopf.on.resume(GROUP, VERSION, "stromconsumergroups")
def consumer_group(body: kopf.Body, retry: int, old: Any = None, **_: Any) -> None:
    _run("StromConsumerGroup", body, old, retry)


@kopf.timer(GROUP, VERSION, "stromconsumergroups", interval=15.0, initial_delay=15.0)
def consumer_group_periodic(body: kopf.Body, **_: Any) -> None:
    """Lag, autoscaling and waiting offset resets move without spec changes."""
    try:
        _run("StromConsumerGroup", body, None, 0)
    except (kopf.PermanentError, kopf.TemporaryError):
        return
