"""The admission webhook's certificate and registration, kept right by the operator at start.

The chart creates the ValidatingWebhookConfiguration (which resources, which Service and path)
with an empty ``caBundle``, and an empty Secret it never overwrites on upgrade. At start the
operator (:func:`prepare`):

1. reads the Secret; if it holds no usable pair for the Service's names
   (:func:`strom_operator.model.webhook_certs.still_good`), makes a new CA and serving pair and
   writes them into it;
2. writes the pair to files for kopf's :class:`kopf.WebhookServer`;
3. sets ``caBundle`` on every webhook of the configuration to the CA, so the API server trusts
   the operator's certificate (and only it).

A restarted operator finds the same pair in the Secret, so requests in flight keep working.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from pathlib import Path
from typing import Any

from strom_operator.model import webhook_certs
from strom_operator.model.webhook_certs import ServingPair
from strom_operator.reconcilers.kube import KubeApi

log = logging.getLogger(__name__)
VWC = ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration")


@dataclasses.dataclass(frozen=True)
class WebhookSetup:
    """Where the webhook is: from the chart (operator flags)."""

    namespace: str
    service: str
    secret: str
    configuration: str
    cert_dir: Path

    @property
    def dns_names(self) -> list[str]:
        return webhook_certs.service_names(self.service, self.namespace)


def _decode(data: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(data.get(key) or "")


def ensure_pair(api: KubeApi, setup: WebhookSetup) -> ServingPair:
    secret = api.get("v1", "Secret", setup.namespace, setup.secret)
    if secret is not None:
        data = secret.get("data") or {}
        stored = ServingPair(_decode(data, webhook_certs.CA_KEY),
                             _decode(data, webhook_certs.CERT_KEY),
                             _decode(data, webhook_certs.PKEY_KEY))
        if webhook_certs.still_good(stored, setup.dns_names):
            return stored
    pair = webhook_certs.make(setup.dns_names)
    encoded = {k: base64.b64encode(v).decode() for k, v in pair.as_secret_data().items()}
    body = {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": setup.secret, "namespace": setup.namespace},
            "type": "Opaque", "data": encoded}
    if secret is None:
        api.apply(body)
    else:
        api.patch("v1", "Secret", setup.namespace, setup.secret, {"data": encoded})
    log.info("made the webhook's CA and serving certificate for %s (Secret %s/%s)",
             setup.dns_names[2], setup.namespace, setup.secret)
    return pair


def register_ca(api: KubeApi, setup: WebhookSetup, ca_pem: bytes) -> int:
    """Set ``caBundle`` on each webhook of the configuration; returns how many changed."""
    config = api.get(*VWC, None, setup.configuration)
    if config is None:
        raise RuntimeError(
            f"ValidatingWebhookConfiguration {setup.configuration} does not exist; install the "
            "chart with webhook.enabled=true, or start the operator without --webhook-port")
    bundle = base64.b64encode(ca_pem).decode()
    webhooks = list(config.get("webhooks") or [])
    changed = 0
    for hook in webhooks:
        client = hook.setdefault("clientConfig", {})
        if client.get("caBundle") != bundle:
            client["caBundle"] = bundle
            changed += 1
    if changed:
        api.patch(*VWC, None, setup.configuration, {"webhooks": webhooks})
    return changed


def prepare(api: KubeApi, setup: WebhookSetup) -> tuple[Path, Path]:
    """Steps 1-3; returns the certificate and key files for the webhook server."""
    pair = ensure_pair(api, setup)
    setup.cert_dir.mkdir(parents=True, exist_ok=True)
    certfile, pkeyfile = setup.cert_dir / "tls.crt", setup.cert_dir / "tls.key"
    certfile.write_bytes(pair.cert_pem)
    pkeyfile.touch(mode=0o600)
    pkeyfile.write_bytes(pair.key_pem)
    changed = register_ca(api, setup, pair.ca_pem)
    log.info("webhook %s: caBundle set on %d webhook(s)", setup.configuration, changed)
    return certfile, pkeyfile
