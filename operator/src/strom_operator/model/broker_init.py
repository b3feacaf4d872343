"""The broker pods' init step: per-pod broker config (id from the ordinal, rack from the node).

Kubernetes' downward API can give a pod its own name and its node's name, but not the node's labels,
so the rack (e.g. the node's ``topology.kubernetes.io/zone``) is read here from the API server with
the pod's service account token (the chart's ``strom-broker-rack`` ClusterRole allows get nodes).
The StatefulSet runs this file, shipped in the cluster's ConfigMap, with the broker image's Python:

    python3 /etc/strom/init/broker_init.py

It reads the shared config ``/etc/strom/server.properties`` (written by the operator), appends the
per-pod keys (``broker.id``, ``advertised.host``, ``broker.rack``) and writes
``/var/run/strom/server.properties``, which the broker container starts from.  Only the standard
library is used; the pure parts (:func:`broker_id_of`, :func:`render`) are unit-tested.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.request

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TEMPLATE = "/etc/strom/server.properties"
OUTPUT = "/var/run/strom/server.properties"


def broker_id_of(pod_name: str) -> int:
    """The StatefulSet ordinal at the end of the pod name (``my-cluster-broker-2`` -> 2)."""
    _head, sep, tail = pod_name.rpartition("-")
    if not sep or not tail.isdigit():
        raise ValueError(f"pod name {pod_name!r} does not end in a StatefulSet ordinal")
    return int(tail)


def render(template: str, *, pod_name: str, headless_domain: str, rack: str) -> str:
    """The shared config plus this pod's keys (a later key wins in a properties file)."""
    lines = [template.rstrip("\n"), "", "# Per-pod keys, written by the init container."]
    lines.append(f"broker.id={broker_id_of(pod_name)}")
    lines.append(f"advertised.host={pod_name}.{headless_domain}")
    if rack:
        lines.append(f"broker.rack={rack}")
    return "\n".join(lines) + "\n"


def node_label(node_name: str, key: str) -> str:  # pragma: no cover - needs a cluster
    """The value of label ``key`` on node ``node_name`` ('' if unset)."""
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    with open(f"{SA_DIR}/token", encoding="utf-8") as f:
        token = f.read().strip()
    context = ssl.create_default_context(cafile=f"{SA_DIR}/ca.crt")
    request = urllib.request.Request(
        f"https://{host}:{port}/api/v1/nodes/{node_name}",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        node = json.load(response)
    return str(node.get("metadata", {}).get("labels", {}).get(key, ""))


def main() -> int:  # pragma: no cover - runs in the pod
    pod_name = os.environ["POD_NAME"]
    domain = os.environ["STROM_HEADLESS_DOMAIN"]
    key = os.environ.get("STROM_RACK_TOPOLOGY_KEY", "")
    rack = ""
    if key:
        rack = node_label(os.environ["NODE_NAME"], key)
        if not rack:
            print(
                f"warning: node {os.environ['NODE_NAME']} has no label {key}; no broker.rack",
                file=sys.stderr,
            )
    with open(TEMPLATE, encoding="utf-8") as f:
        template = f.read()
    os.makedirs(os.path.dirname(OUTPUT), exist_ok=True)
    with open(OUTPUT, "w", encoding="utf-8") as f:
        f.write(render(template, pod_name=pod_name, headless_domain=domain, rack=rack))
    print(f"broker.id={broker_id_of(pod_name)} broker.rack={rack or '(none)'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
