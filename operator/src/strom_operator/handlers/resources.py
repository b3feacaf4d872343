"""StromTopic and StromConsumerGroup handlers: validation and status until the Admin API lands."""

from __future__ import annotations

from typing import Any

import kopf

from strom_operator.handlers.cluster import backoff
from strom_operator.reconcilers import validation
from strom_operator.reconcilers.cluster import ReconcileError
from strom_operator.reconcilers.kube import KubernetesApi

GROUP, VERSION = "strom.dev", "v1alpha1"


def _run(kind: str, body: kopf.Body, old: Any, retry: int) -> None:
    old_spec = dict(old.get("spec") or {}) if isinstance(old, dict) else None
    try:
        validation.reconcile(KubernetesApi(), kind, dict(body), old_spec)
    except ReconcileError as err:
        kopf.warn(body, reason=err.reason, message=str(err)[:1000])
        if err.permanent:
            raise kopf.PermanentError(str(err)) from err
        raise kopf.TemporaryError(str(err), delay=backoff(retry)) from err


@kopf.on.create(GROUP, VERSION, "stromtopics")
@kopf.on.update(GROUP, VERSION, "stromtopics")
@kopf.on.resume(GROUP, VERSION, "stromtopics")
def topic(body: kopf.Body, retry: int, old: Any = None, **_: Any) -> None:
    _run("StromTopic", body, old, retry)


@kopf.on.create(GROUP, VERSION, "stromconsumergroups")
@kopf.on.update(GROUP, VERSION, "stromconsumergroups")
@kopf.on.resume(GROUP, VERSION, "stromconsumergroups")
def consumer_group(body: kopf.Body, retry: int, old: Any = None, **_: Any) -> None:
    _run("StromConsumerGroup", body, old, retry)
