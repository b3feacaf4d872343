"""``strom-operator``: run the kopf operator with Strom's handlers.

Watches every namespace by default (``--all-namespaces``), or the namespaces given with
``--namespace`` (repeatable), as the Helm chart's ``watch`` value chooses.  Liveness is served at
``http://0.0.0.0:8080/healthz``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

import kopf

import strom_operator.handlers.admission
import strom_operator.handlers.cluster
import strom_operator.handlers.metrics
import strom_operator.handlers.resources
import strom_operator.handlers.settings
from strom_operator.reconcilers.webhook import WebhookSetup


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="strom-operator", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="watch this namespace (repeatable); default: all namespaces",
    )
    parser.add_argument(
        "--liveness",
        default="http://0.0.0.0:8080/healthz",
        help="liveness endpoint (empty to disable)",
    )
    webhook = parser.add_argument_group(
        "admission webhook", "the chart's ValidatingWebhookConfiguration calls it (0: off)")
    webhook.add_argument("--webhook-port", type=int, default=0)
    webhook.add_argument("--webhook-service", default="strom-operator-webhook",
                         help="the Service in front of the webhook (the certificate's name)")
    webhook.add_argument("--webhook-secret", default="strom-operator-webhook-tls",
                         help="Secret that keeps the webhook's CA and serving certificate")
    webhook.add_argument("--webhook-configuration", default="strom-operator",
                         help="ValidatingWebhookConfiguration whose caBundle the operator sets")
    webhook.add_argument("--webhook-namespace",
                         default=os.environ.get("STROM_OPERATOR_NAMESPACE", "default"),
                         help="the operator's namespace (default: $STROM_OPERATOR_NAMESPACE)")
    webhook.add_argument("--webhook-cert-dir", default="/tmp/strom-webhook")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("STROM_OPERATOR_LOG_LEVEL", "INFO"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    # Imported for their kopf registrations.
    assert strom_operator.handlers.cluster and strom_operator.handlers.settings
    assert strom_operator.handlers.metrics and strom_operator.handlers.resources
    if args.webhook_port:
        strom_operator.handlers.settings.configure_kubernetes()
        strom_operator.handlers.admission.enable(
            WebhookSetup(namespace=args.webhook_namespace, service=args.webhook_service,
                         secret=args.webhook_secret, configuration=args.webhook_configuration,
                         cert_dir=Path(args.webhook_cert_dir)),
            args.webhook_port)
    asyncio.run(
        kopf.operator(
            standalone=True,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=args.liveness or None,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
