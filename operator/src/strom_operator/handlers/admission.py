"""The validating admission webhook (kopf's ``@kopf.on.validate``), served by the operator.

Registered only when the operator runs with ``--webhook-port`` (the chart's default): kopf refuses
to start with validation handlers but no webhook server, and runs without the chart (tests, a
developer's kubeconfig) need no webhook. :func:`enable` prepares the certificate and the
``caBundle`` (:mod:`strom_operator.reconcilers.webhook`), registers one handler per kind and sets
kopf's :class:`kopf.WebhookServer`. The handlers look up the other objects a rule needs and leave
the decision to :mod:`strom_operator.model.admission`; a refusal is HTTP 422 with every problem,
each naming the field and the fix, which ``kubectl apply`` prints as
``admission webhook "stromtopics.strom.dev" denied the request: spec.replicationFactor: ...``.

The handler ids are the paths the chart's ValidatingWebhookConfiguration calls
(``/validate-stromclusters`` etc.).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from strom_operator.model import admission
from strom_operator.model.admission import Verdict
from strom_operator.model.specs import API_VERSION
from strom_operator.reconcilers.kube import KubeApi, KubernetesApi
from strom_operator.reconcilers.webhook import WebhookSetup, prepare

log = logging.getLogger(__name__)
GROUP, VERSION = "strom.dev", "v1alpha1"
#: plural -> kind: the handler id is ``validate-<plural>``.
KINDS = {"stromclusters": "StromCluster", "stromtopics": "StromTopic",
         "stromconsumergroups": "StromConsumerGroup"}


def decide(api: KubeApi, kind: str, name: str, spec: Any, old: Any, namespace: str,
           dry_run: bool) -> Verdict:
    """The verdict on ``spec`` (``old``: the stored object on an update, else ``None``)."""
    # kopf passes the stored object as a Body (a Mapping, not a dict): None on CREATE.
    old_spec = dict(old.get("spec") or {}) if isinstance(old, Mapping) else None
    if kind == "StromCluster":
        topics = [t for t in api.list(API_VERSION, "StromTopic", namespace, {})
                  if ((t.get("spec") or {}).get("clusterRef") or {}).get("name") == name]
        return admission.review_cluster(spec, old_spec, topics)
    ref = ((spec or {}).get("clusterRef") or {}).get("name") if isinstance(spec, dict) else None
    cluster = api.get(API_VERSION, "StromCluster", namespace, str(ref)) if ref else None
    return admission.review_member(kind, spec, old_spec, namespace, cluster, dry_run=dry_run)


def _handler(kind: str) -> Any:
    def validate(spec: kopf.Spec, name: str | None, old: Any, namespace: str | None,
                 dryrun: bool, warnings: list[str], **_: Any) -> None:
        verdict = decide(KubernetesApi(), kind, name or "", dict(spec), old,
                         namespace or "default", dryrun)
        warnings.extend(verdict.warnings)
        if not verdict.allowed:
            raise kopf.AdmissionError(f"{kind}: {verdict.message}", code=422)

    return validate


def enable(setup: WebhookSetup, port: int) -> None:
    """Prepare the certificate and registration now, and register the handlers and server."""
    certfile, pkeyfile = prepare(KubernetesApi(), setup)
    for plural, kind in KINDS.items():
        kopf.on.validate(GROUP, VERSION, plural, id=f"validate-{plural}",
                         operations=["CREATE", "UPDATE"])(_handler(kind))

    @kopf.on.startup()
    def webhook_server(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.admission.server = kopf.WebhookServer(
            addr="0.0.0.0", port=port, certfile=str(certfile), pkeyfile=str(pkeyfile),
            host=setup.dns_names[2])

    log.info("admission webhook on :%d for %s", port, ", ".join(KINDS.values()))
