"""The Kubernetes API as the reconcilers need it: apply, get, list, delete, patch status.

:class:`KubeApi` is the small interface the reconcile steps use; :class:`KubernetesApi` implements
it with the official ``kubernetes`` client, generically over ``apiVersion``/``kind`` (one code path
for ConfigMaps, StatefulSets, CRs...). ``apply`` is server-side apply (``fieldManager=strom-
operator``, ``force=true``) so repeated reconciles are idempotent and the operator owns exactly the
fields it sets; when the server answers 404 to an apply (API emulators without server-side apply
do), it falls back to create, and a 409 on create (someone created it meanwhile) to a merge patch.

Tests of the steps use an in-memory fake of :class:`KubeApi`; the kopf process test runs this
implementation against kmock.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Protocol

from kubernetes import client as k8s

FIELD_MANAGER = "strom-operator"

#: (apiVersion, kind) -> (plural, namespaced)
RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Service"): ("services", True),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "Pod"): ("pods", True),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("v1", "Event"): ("events", True),
    ("v1", "Namespace"): ("namespaces", False),
    ("apps/v1", "StatefulSet"): ("statefulsets", True),
    ("apps/v1", "Deployment"): ("deployments", True),
    ("policy/v1", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("networkpolicies", True),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ("servicemonitors", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("storage.k8s.io/v1", "StorageClass"): ("storageclasses", False),
    ("strom.dev/v1alpha1", "StromCluster"): ("stromclusters", True),
    ("strom.dev/v1alpha1", "StromTopic"): ("stromtopics", True),
    ("strom.dev/v1alpha1", "StromConsumerGroup"): ("stromconsumergroups", True),
}


class ApiError(Exception):
    """A non-2xx answer; ``status`` is the HTTP code, the message the server's."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}")


class KubeApi(Protocol):
    def apply(self, obj: dict[str, Any]) -> dict[str, Any]: ...

    def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None: ...

    def list(
        self, api_version: str, kind: str, namespace: str | None, selector: dict[str, str]
    ) -> list[dict[str, Any]]: ...

    def patch(
        self, api_version: str, kind: str, namespace: str | None, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]: ...

    def patch_status(
        self, api_version: str, kind: str, namespace: str | None, name: str, status: dict[str, Any]
    ) -> None: ...

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool: ...

    def scale(
        self, api_version: str, kind: str, namespace: str | None, name: str, replicas: int
    ) -> None: ...

#: What the admission webhook's start-up touches (its own Secret and configuration only; the chart
#: grants those by name, apart from the table above).
WEBHOOK_RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Secret"): ("secrets", True),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): (
        "validatingwebhookconfigurations", False),
}


def path_of(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    try:
        plural, namespaced = (RESOURCES | WEBHOOK_RESOURCES)[(api_version, kind)]
    except KeyError:
        raise ValueError(f"strom-operator does not manage {kind} ({api_version})") from None
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced:
        if not namespace:
            raise ValueError(f"{kind} {name} needs a namespace")
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return f"{base}/{name}" if name else base


def matches(obj: dict[str, Any], selector: dict[str, str]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


class KubernetesApi:
    """:class:`KubeApi` over the official client (configured by ``kubernetes.config``)."""

    def __init__(self, api_client: k8s.ApiClient | None = None) -> None:
        self.client = api_client or k8s.ApiClient()

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        params = self.client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.client.call_api(*params)
        raw = response.read()  # type: ignore[no-untyped-call]
        status = int(response.status)
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")
        if status >= 400:
            message = text
            with contextlib.suppress(ValueError, AttributeError):
                message = str(json.loads(text).get("message", text))
            raise ApiError(status, message[:500])
        if not text:
            return {}
        data = json.loads(text)
        return data if isinstance(data, dict) else {}

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        api_version, kind = obj["apiVersion"], obj["kind"]
        path = path_of(api_version, kind, meta.get("namespace"), meta["name"])
        try:
            return self._call(
                "PATCH",
                path,
                body=obj,
                query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
                content_type="application/apply-patch+yaml",
            )
        except ApiError as err:
            if err.status != 404:
                raise
        try:
            return self._call("POST", path_of(api_version, kind, meta.get("namespace")), body=obj)
        except ApiError as err:
            if err.status != 409:
                raise
        return self._call("PATCH", path, body=obj, content_type="application/merge-patch+json")

    def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        try:
            return self._call("GET", path_of(api_version, kind, namespace, name))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def list(
        self, api_version: str, kind: str, namespace: str | None, selector: dict[str, str]
    ) -> list[dict[str, Any]]:
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(selector.items())))]
        data = self._call("GET", path_of(api_version, kind, namespace), query=query)
        items = data.get("items") or []
        # Filter again: some servers (and emulators) ignore labelSelector.
        return [i for i in items if isinstance(i, dict) and matches(i, selector)]

    def patch(
        self, api_version: str, kind: str, namespace: str | None, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        return self._call(
            "PATCH",
            path_of(api_version, kind, namespace, name),
            body=patch,
            content_type="application/merge-patch+json",
        )

    def patch_status(
        self, api_version: str, kind: str, namespace: str | None, name: str, status: dict[str, Any]
    ) -> None:
        self._call(
            "PATCH",
            path_of(api_version, kind, namespace, name) + "/status",
            body={"status": status},
            content_type="application/merge-patch+json",
        )

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        try:
            self._call("DELETE", path_of(api_version, kind, namespace, name))
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True

    def scale(
        self, api_version: str, kind: str, namespace: str | None, name: str, replicas: int
    ) -> None:
        """Through the ``scale`` subresource, as ``kubectl scale`` and the HPA do (so only the
        replica count is touched, whoever manages the rest of the workload)."""
        self._call(
            "PATCH",
            path_of(api_version, kind, namespace, name) + "/scale",
            body={"spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )
