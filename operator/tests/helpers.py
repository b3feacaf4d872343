"""Shared test helpers: paths, example loading, CRD schema -> JSON Schema conversion."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
EXAMPLES = CRDS / "examples"
CHART = REPO / "charts" / "strom"
K8S_VERSION = "1.31"


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def crd_for(kind: str) -> dict[str, Any]:
    for path in CRDS.glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        if doc["spec"]["names"]["kind"] == kind:
            return doc
    raise KeyError(kind)


def json_schema(openapi: Any) -> Any:
    """A structural OpenAPI v3 schema as JSON Schema: x-kubernetes-* keys dropped; objects with
    properties reject unknown fields (the API server prunes them; we want to catch typos)."""
    if isinstance(openapi, list):
        return [json_schema(x) for x in openapi]
    if not isinstance(openapi, dict):
        return openapi
    out = {k: json_schema(v) for k, v in openapi.items() if not k.startswith("x-kubernetes-")}
    if openapi.get("x-kubernetes-int-or-string") is True:  # what the API server accepts
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def validator_for(kind: str) -> Any:
    import jsonschema

    crd = crd_for(kind)
    schema = json_schema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
