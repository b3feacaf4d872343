"""A hostPath volume provisioner for StorageClass ``standard``: the node is one machine, so a
PersistentVolumeClaim becomes a directory under the cluster's ``volumes`` directory.

It follows the external-provisioner protocol: the PV controller marks a claim of this class with
``volume.kubernetes.io/storage-provisioner: strom.local/hostpath`` (and, the class binding on
first consumer, ``volume.kubernetes.io/selected-node`` once a pod using it is scheduled); the
provisioner then creates a PersistentVolume pre-bound to the claim (``claimRef``) with a node
affinity to the node, and the PV controller binds them. A released volume whose policy is
Delete has its directory removed and its PV deleted. The decisions are pure functions of the
objects (:func:`wants_volume`, :func:`volume_for`, :func:`should_delete`); :func:`main` polls
the API once a second, as ``python -m strom.testing.kube.provisioner KUBECONFIG VOLUMES``.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from strom.testing.kube import layout as L

PROVISIONER_ANNOTATIONS = ("volume.kubernetes.io/storage-provisioner",
                           "volume.beta.kubernetes.io/storage-provisioner")
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


def wants_volume(pvc: dict[str, Any]) -> bool:
    """A pending, unbound claim handed to this provisioner (and placed on a node)."""
    meta, spec = pvc.get("metadata", {}), pvc.get("spec", {})
    notes = meta.get("annotations") or {}
    ours = any(notes.get(a) == L.PROVISIONER_NAME for a in PROVISIONER_ANNOTATIONS)
    return (ours and not spec.get("volumeName") and not meta.get("deletionTimestamp")
            and (pvc.get("status") or {}).get("phase", "Pending") == "Pending"
            and notes.get(SELECTED_NODE, L.NODE_NAME) == L.NODE_NAME)


def volume_name(pvc: dict[str, Any]) -> str:
    return f"pvc-{pvc['metadata']['uid']}"


def volume_for(pvc: dict[str, Any], root: Path) -> dict[str, Any]:
    """The PersistentVolume for ``pvc``, pre-bound to it."""
    meta, spec = pvc["metadata"], pvc["spec"]
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if not size:
        raise ValueError(f"claim {meta['namespace']}/{meta['name']} requests no storage size "
                         "(spec.resources.requests.storage)")
    name = volume_name(pvc)
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: L.PROVISIONER_NAME}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": spec.get("storageClassName") or L.STORAGE_CLASS,
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "namespace": meta["namespace"], "name": meta["name"],
                         "uid": meta["uid"]},
            "hostPath": {"path": str(root / name), "type": "Directory"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{
                "key": "kubernetes.io/hostname", "operator": "In",
                "values": [L.NODE_NAME]}]}]}},
        },
    }


def should_delete(pv: dict[str, Any]) -> bool:
    notes = pv.get("metadata", {}).get("annotations") or {}
    return (notes.get(PROVISIONED_BY) == L.PROVISIONER_NAME
            and pv.get("spec", {}).get("persistentVolumeReclaimPolicy") == "Delete"
            and (pv.get("status") or {}).get("phase") in ("Released", "Failed"))


def volume_dir(pv: dict[str, Any], root: Path) -> Path | None:
    """The directory of ``pv`` if it is one of ours directly under ``root`` (never anything
    else, whatever the object says)."""
    path = Path((pv.get("spec", {}).get("hostPath") or {}).get("path", ""))
    return path if path.parent == root and path.name == pv["metadata"]["name"] else None


class Provisioner:
    def __init__(self, kubeconfig: Path, root: Path) -> None:
        from kubernetes import client, config

        self.root = root
        api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig))
        self.core = client.CoreV1Api(api_client)
        self.api_exception = client.ApiException

    def _list(self, fn: Any) -> list[dict[str, Any]]:
        resp = fn(_preload_content=False, _request_timeout=10)
        return list(json.loads(resp.data).get("items", []))

    def tick(self) -> None:
        for pvc in self._list(self.core.list_persistent_volume_claim_for_all_namespaces):
            if wants_volume(pvc):
                self.provision(pvc)
        for pv in self._list(self.core.list_persistent_volume):
            if should_delete(pv):
                self.delete(pv)

    def provision(self, pvc: dict[str, Any]) -> None:
        body: Any = volume_for(pvc, self.root)
        path = Path(body["spec"]["hostPath"]["path"])
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)  # pods may run as any user (local-path-provisioner does the same)
        try:
            self.core.create_persistent_volume(body, _request_timeout=10)
            print(f"provisioned {body['metadata']['name']} for "
                  f"{pvc['metadata']['namespace']}/{pvc['metadata']['name']}", flush=True)
        except self.api_exception as exc:
            if exc.status != 409:
                raise

    def delete(self, pv: dict[str, Any]) -> None:
        path = volume_dir(pv, self.root)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
        try:
            self.core.delete_persistent_volume(pv["metadata"]["name"], _request_timeout=10)
            print(f"deleted {pv['metadata']['name']}", flush=True)
        except self.api_exception as exc:
            if exc.status != 404:
                raise


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m strom.testing.kube.provisioner KUBECONFIG VOLUMES_DIR",
              file=sys.stderr)
        return 2
    prov = Provisioner(Path(args[0]), Path(args[1]))
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    print(f"provisioner {L.PROVISIONER_NAME} serving StorageClass {L.STORAGE_CLASS}",
          flush=True)
    while not stop:
        try:
            prov.tick()
        except Exception as exc:  # the API may be briefly away; say so and go on
            print(f"provisioner: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        for _ in range(10):
            if stop:
                break
            time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
