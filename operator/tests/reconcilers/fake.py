"""An in-memory KubeApi for reconciler tests (records every call)."""

from __future__ import annotations

import copy
from typing import Any

from strom_operator.reconcilers.kube import ApiError, matches


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        elif v is None:
            out.pop(k, None)
        else:
            out[k] = copy.deepcopy(v)
    return out


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str | None, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.fail_apply: dict[str, int] = {}

    def put(self, obj: dict[str, Any]) -> None:
        m = obj["metadata"]
        self.objects[(obj["apiVersion"], obj["kind"], m.get("namespace"), m["name"])] = obj

    def find(self, kind: str, name: str) -> dict[str, Any] | None:
        for (_, k, _, n), obj in self.objects.items():
            if k == kind and n == name:
                return obj
        return None

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("apply", obj["kind"], obj["metadata"]["name"]))
        if obj["kind"] in self.fail_apply:
            raise ApiError(self.fail_apply[obj["kind"]], "boom")
        m = obj["metadata"]
        key = (obj["apiVersion"], obj["kind"], m.get("namespace"), m["name"])
        self.objects[key] = _merge(self.objects.get(key, {}), obj)
        return self.objects[key]

    def get(self, api_version, kind, namespace, name):
        return copy.deepcopy(self.objects.get((api_version, kind, namespace, name)))

    def list(self, api_version, kind, namespace, selector):
        return [
            copy.deepcopy(o)
            for (av, k, ns, _), o in sorted(self.objects.items())
            if av == api_version and k == kind and ns == namespace and matches(o, selector)
        ]

    def patch(self, api_version, kind, namespace, name, patch):
        self.calls.append(("patch", kind, name))
        key = (api_version, kind, namespace, name)
        if key not in self.objects:
            raise ApiError(404, "not found")
        self.objects[key] = _merge(self.objects[key], patch)
        return self.objects[key]

    def patch_status(self, api_version, kind, namespace, name, status):
        self.calls.append(("status", kind, name))
        key = (api_version, kind, namespace, name)
        self.objects[key] = _merge(self.objects.get(key, {}), {"status": status})

    def delete(self, api_version, kind, namespace, name):
        self.calls.append(("delete", kind, name))
        return self.objects.pop((api_version, kind, namespace, name), None) is not None

    def scale(self, api_version, kind, namespace, name, replicas):
        self.calls.append(("scale", kind, name))
        self.patch(api_version, kind, namespace, name, {"spec": {"replicas": replicas}})
