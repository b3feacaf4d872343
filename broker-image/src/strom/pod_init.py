"""The broker pods' init step: per-pod broker config (id from the ordinal, rack from the node).

Kubernetes' downward API can give a pod its own name and its node's name, but not the node's labels,
so the rack (e.g. the node's ``topology.kubernetes.io/zone``) is read here from the API server with
the pod's service account token (the chart's ``strom-broker-rack`` ClusterRole allows get nodes).
The operator's StatefulSet runs it in an init container of the broker image (so the code the pod
runs is the code of the image it runs, not a copy carried in a ConfigMap):

    python3 -m strom.pod_init --template /etc/strom/server.properties \
        --output /var/run/strom/server.properties

It reads the shared config (written by the operator into the cluster's ConfigMap), appends the
per-pod keys (``broker.id``, ``advertised.host``, ``broker.rack``) and writes the file the broker
container starts from. Only the standard library is used (the init container has 64 MiB; an
import-linter contract keeps it so); the pure parts (:func:`broker_id_of`, :func:`render`) are
unit-tested, and a test runs the module as the pod does.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import urllib.request

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m strom.pod_init",
        description="Write a broker pod's config: the shared one plus broker.id, "
                    "advertised.host and broker.rack (POD_NAME, STROM_HEADLESS_DOMAIN, "
                    "STROM_RACK_TOPOLOGY_KEY, NODE_NAME from the environment).")
    parser.add_argument("--template", required=True, help="the shared server.properties")
    parser.add_argument("--output", required=True, help="where to write this pod's config")
    args = parser.parse_args(argv)
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
    with open(args.template, encoding="utf-8") as f:
        template = f.read()
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(render(template, pod_name=pod_name, headless_domain=domain, rack=rack))
    print(f"broker.id={broker_id_of(pod_name)} broker.rack={rack or '(none)'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
