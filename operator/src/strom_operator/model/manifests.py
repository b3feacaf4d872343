"""Desired Kubernetes objects for a StromCluster, as plain dicts (Strimzi's model layer).

:func:`desired_objects` returns, in apply order: the brokers' ServiceAccount, the ConfigMap (broker
config and the init script), the headless Service (stable pod DNS), the bootstrap Service (what
clients connect to), the StatefulSet, the PodDisruptionBudget and, when enabled, a ServiceMonitor
and a NetworkPolicy.  Every namespaced object carries an owner reference to the StromCluster (so
deleting the cluster garbage-collects them) and the ``app.kubernetes.io/*`` labels.  With rack
awareness a ClusterRoleBinding lets the brokers' ServiceAccount read node labels; being
cluster-scoped it can not have a namespaced owner, so the delete handler removes it.

The StatefulSet uses ``updateStrategy: OnDelete``: the operator restarts pods itself, one at a time
and in the order :mod:`strom_operator.model.rolling` computes; the pod template carries a hash of
everything that needs a restart (config, image, resources) so stale pods are visible.

Pure: no I/O, no clocks.  Each builder is tested and each result validated against the Kubernetes
OpenAPI schemas by ``kubernetes-validate``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from strom_operator.model.fields import config_value_str
from strom_operator.model.specs import API_VERSION, StromClusterSpec

DATA_DIR = "/var/lib/strom/data"
CONFIG_DIR = "/etc/strom"
RUN_DIR = "/var/run/strom"
CONFIG_HASH_ANNOTATION = "strom.dev/config-hash"
RACK_CLUSTER_ROLE = "strom-broker-rack"
BROKER_UID = 1000
MANAGED_BY = "strom-operator"


@dataclasses.dataclass(frozen=True)
class ClusterRef:
    """The identity of the StromCluster object the manifests belong to."""

    name: str
    namespace: str
    uid: str
    generation: int | None = None


@dataclasses.dataclass(frozen=True)
class Names:
    """Object names derived from the cluster name (one place, so nothing drifts)."""

    cluster: str

    @property
    def statefulset(self) -> str:
        return f"{self.cluster}-broker"

    @property
    def headless(self) -> str:
        return f"{self.cluster}-brokers"

    @property
    def bootstrap(self) -> str:
        return f"{self.cluster}-bootstrap"

    @property
    def config(self) -> str:
        return f"{self.cluster}-config"

    @property
    def service_account(self) -> str:
        return f"{self.cluster}-broker"

    @property
    def pdb(self) -> str:
        return f"{self.cluster}-broker"

    def pod(self, ordinal: int) -> str:
        return f"{self.statefulset}-{ordinal}"

    def rack_binding(self, namespace: str) -> str:
        return f"strom-broker-rack-{namespace}-{self.cluster}"[:253]


def selector_labels(cluster: str) -> dict[str, str]:
    """Labels that select the brokers of one cluster (StatefulSet, Services, PDB selectors)."""
    return {
        "app.kubernetes.io/name": "strom",
        "app.kubernetes.io/instance": cluster,
        "app.kubernetes.io/component": "broker",
    }


def labels(cluster: str, component: str = "broker") -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "strom",
        "app.kubernetes.io/instance": cluster,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "strom",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "strom.dev/cluster": cluster,
    }


def label_selector(cluster: str) -> str:
    """The selector string of the scale subresource's status.selector."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(cluster).items()))


def owner_reference(ref: ClusterRef) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "StromCluster",
        "name": ref.name,
        "uid": ref.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _meta(ref: ClusterRef, name: str, component: str = "broker") -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": labels(ref.name, component),
        "ownerReferences": [owner_reference(ref)],
    }


# ----------------------------------------------------------------------------------------------
# Broker config
# ----------------------------------------------------------------------------------------------


def default_broker_config(spec: StromClusterSpec) -> dict[str, str]:
    """Defaults the operator picks from the cluster size; spec.config overrides them."""
    rf = min(3, spec.brokers.replicas)
    return {
        "num.partitions": "1",
        "default.replication.factor": str(rf),
        "min.insync.replicas": "2" if rf >= 3 else "1",
        "log.retention.ms": str(7 * 24 * 3600 * 1000),
    }


def quorum_voters(ref: ClusterRef, spec: StromClusterSpec) -> str:
    """``controller.quorum.voters``: the first ``controllers.replicas`` pods, by their stable DNS
    names on the headless Service (combined mode: a voter's address is its broker port). Every
    broker gets the same list; the others follow the metadata log as observers."""
    names = Names(ref.name)
    domain = f"{names.headless}.{ref.namespace}.svc"
    return ",".join(f"{i}@{names.pod(i)}.{domain}:{spec.listeners.port}"
                    for i in range(spec.controllers.replicas))


def broker_config(ref: ClusterRef, spec: StromClusterSpec) -> dict[str, str]:
    """Every shared broker key (per-pod keys are added by the init step)."""
    config: dict[str, str] = {
        "cluster.id": ref.uid,
        "host": "0.0.0.0",
        "port": str(spec.listeners.port),
        # the advertised Kafka listener defaults to advertised.host (the pod's DNS name)
        "listeners": f"PLAINTEXT://0.0.0.0:{spec.listeners.kafka_port}",
        "metrics.port": str(spec.metrics.port),
        "log.dirs": DATA_DIR,
        "log.level": spec.log_level,
        "controller.quorum.voters": quorum_voters(ref, spec),
    }
    config.update(default_broker_config(spec))
    config.update({k: config_value_str(v) for k, v in spec.config.items()})
    return config


def render_properties(ref: ClusterRef, config: dict[str, str]) -> str:
    lines = [
        f"# Generated by strom-operator for StromCluster {ref.namespace}/{ref.name}: do not edit.",
        "# Per-pod keys (broker.id, advertised.host, broker.rack) are appended by the init step.",
    ]
    lines += [f"{k}={v}" for k, v in sorted(config.items())]
    return "\n".join(lines) + "\n"


def config_map(ref: ClusterRef, spec: StromClusterSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(ref, Names(ref.name).config),
        "data": {
            "server.properties": render_properties(ref, broker_config(ref, spec)),
        },
    }


def config_hash(ref: ClusterRef, spec: StromClusterSpec) -> str:
    """Hash of what a running broker can not pick up without a restart."""
    material = {
        "config": broker_config(ref, spec),
        "image": spec.image,
        "resources": _resources(spec),
        "rack": spec.rack.topology_key if spec.rack else "",
        "logLevel": spec.log_level,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------------------------
# Services
# ----------------------------------------------------------------------------------------------


def _ports(spec: StromClusterSpec) -> list[dict[str, Any]]:
    return [
        {"name": "grpc", "port": spec.listeners.port, "targetPort": "grpc", "protocol": "TCP"},
        {"name": "metrics", "port": spec.metrics.port, "targetPort": "metrics", "protocol": "TCP"},
        {"name": "kafka", "port": spec.listeners.kafka_port, "targetPort": "kafka",
         "protocol": "TCP"},
    ]


def headless_service(ref: ClusterRef, spec: StromClusterSpec) -> dict[str, Any]:
    """Stable DNS per broker (``<pod>.<cluster>-brokers.<ns>.svc``), ready or not."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ref, Names(ref.name).headless),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(ref.name),
            "ports": _ports(spec),
        },
    }


def bootstrap_service(ref: ClusterRef, spec: StromClusterSpec) -> dict[str, Any]:
    """What clients put in ``bootstrap.servers``: ready brokers only."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ref, Names(ref.name).bootstrap),
        "spec": {
            "type": spec.listeners.service_type,
            "selector": selector_labels(ref.name),
            "ports": [p for p in _ports(spec) if p["name"] in ("grpc", "kafka")],
        },
    }


def bootstrap_address(ref: ClusterRef, spec: StromClusterSpec) -> str:
    return f"{Names(ref.name).bootstrap}.{ref.namespace}.svc:{spec.listeners.port}"


def kafka_bootstrap_address(ref: ClusterRef, spec: StromClusterSpec) -> str:
    """``bootstrap.servers`` for Kafka clients: the bootstrap Service's Kafka port."""
    return f"{Names(ref.name).bootstrap}.{ref.namespace}.svc:{spec.listeners.kafka_port}"


# ----------------------------------------------------------------------------------------------
# ServiceAccount and rack binding
# ----------------------------------------------------------------------------------------------


def service_account(ref: ClusterRef) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(ref, Names(ref.name).service_account),
        "automountServiceAccountToken": True,
    }


def rack_cluster_role_binding(ref: ClusterRef) -> dict[str, Any]:
    """Lets the brokers' init step read node labels (no owner: cluster-scoped)."""
    names = Names(ref.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": names.rack_binding(ref.namespace),
            "labels": {**labels(ref.name), "strom.dev/namespace": ref.namespace},
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": RACK_CLUSTER_ROLE,
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": names.service_account, "namespace": ref.namespace}
        ],
    }


# ----------------------------------------------------------------------------------------------
# StatefulSet
# ----------------------------------------------------------------------------------------------


def _resources(spec: StromClusterSpec) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for kind, values in (("requests", spec.resources.requests), ("limits", spec.resources.limits)):
        entries = {k: v for k, v in (("cpu", values.cpu), ("memory", values.memory)) if v}
        if entries:
            out[kind] = entries
    return out


def _affinity(ref: ClusterRef) -> dict[str, Any]:
    """Spread brokers over nodes and zones, preferred rather than required (Strimzi sets no
    anti-affinity by default): with a required rule a cluster with fewer nodes than brokers
    leaves the extra brokers Pending for ever (a single-node cluster ran 1 of 3), while
    replication already survives the loss of any broker."""
    selector = {"matchLabels": selector_labels(ref.name)}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": weight,
                    "podAffinityTerm": {"labelSelector": selector, "topologyKey": key},
                }
                for weight, key in ((100, "kubernetes.io/hostname"),
                                    (50, "topology.kubernetes.io/zone"))
            ],
        }
    }


def _security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": BROKER_UID,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _env(ref: ClusterRef, spec: StromClusterSpec) -> list[dict[str, Any]]:
    def field(path: str) -> dict[str, Any]:
        return {"fieldRef": {"fieldPath": path}}

    return [
        {"name": "POD_NAME", "valueFrom": field("metadata.name")},
        {"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")},
        {"name": "NODE_NAME", "valueFrom": field("spec.nodeName")},
        {
            "name": "STROM_HEADLESS_DOMAIN",
            "value": f"{Names(ref.name).headless}.{ref.namespace}.svc",
        },
        {
            "name": "STROM_RACK_TOPOLOGY_KEY",
            "value": spec.rack.topology_key if spec.rack else "",
        },
    ]


def scrape_annotations(port: int) -> dict[str, str]:
    """The ``prometheus.io/*`` annotations plain Prometheus' kubernetes_sd scrape config keys on
    (docs/prometheus/kubernetes-sd-scrape.yaml); prometheus-operator users get a PodMonitor."""
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": "/metrics",
    }


def statefulset(ref: ClusterRef, spec: StromClusterSpec) -> dict[str, Any]:
    names = Names(ref.name)
    mounts = [
        {"name": "data", "mountPath": DATA_DIR.rsplit("/", 1)[0]},
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "run", "mountPath": RUN_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    probe_common = {"timeoutSeconds": 5, "periodSeconds": 10}
    broker: dict[str, Any] = {
        "name": "broker",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ["strom", "broker", "start", "--config", f"{RUN_DIR}/server.properties"],
        "ports": [
            {"name": "grpc", "containerPort": spec.listeners.port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": spec.metrics.port, "protocol": "TCP"},
            {"name": "kafka", "containerPort": spec.listeners.kafka_port, "protocol": "TCP"},
        ],
        "env": _env(ref, spec),
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "metrics"},
            "initialDelaySeconds": 5,
            "failureThreshold": 3,
            **probe_common,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "initialDelaySeconds": 30,
            "failureThreshold": 6,
            **probe_common,
        },
        "volumeMounts": mounts,
        "securityContext": _security_context(),
    }
    resources = _resources(spec)
    if resources:
        broker["resources"] = resources
    init = {
        "name": "broker-init",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        # the broker image's own init step (strom.pod_init), not a script carried in the ConfigMap
        "command": ["python3", "-m", "strom.pod_init", "--template",
                    f"{CONFIG_DIR}/server.properties", "--output", f"{RUN_DIR}/server.properties"],
        "env": _env(ref, spec),
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "run", "mountPath": RUN_DIR},
        ],
        "securityContext": _security_context(),
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
    }
    claim: dict[str, Any] = {
        "metadata": {"name": "data", "labels": labels(ref.name)},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": spec.storage.size}},
        },
    }
    if spec.storage.storage_class_name:
        claim["spec"]["storageClassName"] = spec.storage.storage_class_name
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(ref, names.statefulset),
        "spec": {
            "serviceName": names.headless,
            "replicas": spec.brokers.replicas,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Delete" if spec.storage.delete_claim else "Retain",
                "whenScaled": "Retain",
            },
            "selector": {"matchLabels": selector_labels(ref.name)},
            "template": {
                "metadata": {
                    "labels": labels(ref.name),
                    "annotations": {
                        CONFIG_HASH_ANNOTATION: config_hash(ref, spec),
                        **scrape_annotations(spec.metrics.port),
                    },
                },
                "spec": {
                    "serviceAccountName": names.service_account,
                    "terminationGracePeriodSeconds": 60,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": BROKER_UID,
                        "runAsGroup": BROKER_UID,
                        "fsGroup": BROKER_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "affinity": _affinity(ref),
                    "initContainers": [init],
                    "containers": [broker],
                    "volumes": [
                        {"name": "config", "configMap": {"name": names.config}},
                        {"name": "run", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
            "volumeClaimTemplates": [claim],
        },
    }


def pod_disruption_budget(ref: ClusterRef) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(ref, Names(ref.name).pdb),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(ref.name)}},
    }


def service_monitor(ref: ClusterRef, spec: StromClusterSpec) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta(ref, Names(ref.name).statefulset),
        "spec": {
            "selector": {"matchLabels": selector_labels(ref.name)},
            "namespaceSelector": {"matchNames": [ref.namespace]},
            "endpoints": [
                {
                    "port": "metrics",
                    "path": "/metrics",
                    "interval": spec.metrics.service_monitor.interval,
                }
            ],
        },
    }


@dataclasses.dataclass(frozen=True)
class OperatorIdentity:
    """Where the operator's own pods run (its namespace and pod labels), for the NetworkPolicy."""

    namespace: str
    pod_labels: tuple[tuple[str, str], ...]


def network_policy(ref: ClusterRef, spec: StromClusterSpec,
                   operator: OperatorIdentity | None = None) -> dict[str, Any]:
    """Brokers reach each other on every port; clients reach the gRPC and Kafka ports; metrics
    are open; the operator's pods reach the gRPC port (its Admin API calls) and nothing else,
    which is what lets it probe whether the policy is enforced
    (:mod:`strom_operator.model.environment`)."""
    peers = {"podSelector": {"matchLabels": selector_labels(ref.name)}}
    client_from: list[dict[str, Any]] = [
        {"namespaceSelector": {"matchLabels": dict(spec.network_policy.client_namespace_labels)}}
    ]
    operator_rules: list[dict[str, Any]] = []
    if operator is not None:
        operator_rules.append({
            "from": [{
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": operator.namespace}},
                "podSelector": {"matchLabels": dict(operator.pod_labels)},
            }],
            "ports": [{"port": spec.listeners.port, "protocol": "TCP"}],
        })
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(ref, Names(ref.name).statefulset),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(ref.name)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [peers]},
                {
                    "from": client_from,
                    "ports": [{"port": spec.listeners.port, "protocol": "TCP"},
                              {"port": spec.listeners.kafka_port, "protocol": "TCP"}],
                },
                {"ports": [{"port": spec.metrics.port, "protocol": "TCP"}]},
                *operator_rules,
            ],
        },
    }


def desired_objects(ref: ClusterRef, spec: StromClusterSpec,
                    operator: OperatorIdentity | None = None) -> list[dict[str, Any]]:
    """Every object the cluster needs, in the order to apply them."""
    objects = [service_account(ref)]
    if spec.rack is not None:
        objects.append(rack_cluster_role_binding(ref))
    objects += [
        config_map(ref, spec),
        headless_service(ref, spec),
        bootstrap_service(ref, spec),
        statefulset(ref, spec),
        pod_disruption_budget(ref),
    ]
    if spec.metrics.service_monitor.enabled:
        objects.append(service_monitor(ref, spec))
    if spec.network_policy.enabled:
        objects.append(network_policy(ref, spec, operator))
    return objects
