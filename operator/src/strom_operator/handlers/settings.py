"""Operator start-up: kopf settings and the Kubernetes client's configuration."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import kubernetes

log = logging.getLogger(__name__)


def configure_kubernetes() -> None:
    """In-cluster service account first, then the kubeconfig (``$KUBECONFIG`` or default)."""
    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    configure_kubernetes()
    settings.persistence.finalizer = "strom.dev/finalizer"
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    settings.queueing.error_delays = [1, 2, 5, 10, 30, 60]
