#!/usr/bin/env python
"""Check the example manifests against the schemas of their custom resources.

Every kustomization under ``deploy/`` (``deploy/kubernetes``, ``deploy/gateways/*``)
is built with ``kubectl kustomize``; each object whose kind a CustomResourceDefinition
in ``--crds`` defines (Envoy Gateway's, the Gateway API's, Istio's: take them from
those projects' releases) is validated against that CRD's ``openAPIV3Schema``: no
field the schema does not name (unless it preserves unknown fields), types, enums,
patterns, required fields, list bounds. Objects of Kubernetes' own kinds are
reported as not checked (their schemas come from a cluster's OpenAPI document).

    .venv/bin/python -m scripts.validate_manifests --crds DIR [--json OUT]

Exit 1 when an object fails its schema or a kind has no CRD in ``--crds`` that is
not a Kubernetes kind.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
KUSTOMIZATIONS = ("deploy/kubernetes", "deploy/gateways/envoy-gateway", "deploy/gateways/istio")
#: API groups served by Kubernetes itself (no CRD).
BUILTIN_GROUPS = frozenset({"", "apps", "policy", "networking.k8s.io", "batch", "autoscaling"})

Schema = dict[str, Any]
#: Python types of the schema types.
_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "integer": int,
    "number": (int, float),
}


def crd_schemas(directory: Path) -> dict[tuple[str, str, str], Schema]:
    """(group, version, kind) -> openAPIV3Schema of every CRD in ``directory``."""
    found: dict[tuple[str, str, str], Schema] = {}
    for path in sorted(directory.rglob("*.y*ml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec.get("versions", []):
                schema = version.get("schema", {}).get("openAPIV3Schema")
                if schema:
                    found[(spec["group"], version["name"], spec["names"]["kind"])] = schema
    return found


def validate(value: Any, schema: Schema, path: str = "") -> Iterator[str]:
    """The ways ``value`` breaks ``schema`` (the structural subset CRDs use)."""
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            yield f"{path}: expected int or string, got {type(value).__name__}"
        return
    kind = schema.get("type")
    if kind in _TYPES and (
        not isinstance(value, _TYPES[kind])
        or (kind in ("integer", "number") and isinstance(value, bool))
    ):
        yield f"{path}: expected {kind}, got {type(value).__name__}"
        return
    if "enum" in schema and value not in schema["enum"]:
        yield f"{path}: {value!r} is not one of {schema['enum']}"
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        yield f"{path}: {value!r} does not match {schema['pattern']}"
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            yield f"{path}: fewer than {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            yield f"{path}: more than {schema['maxItems']} items"
        for i, item in enumerate(value):
            yield from validate(item, schema.get("items", {}), f"{path}[{i}]")
    if isinstance(value, dict):
        properties: Schema = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                yield f"{path}: missing required field {name!r}"
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            where = f"{path}.{name}" if path else name
            if name in properties:
                yield from validate(item, properties[name], where)
            elif isinstance(extra, dict):
                yield from validate(item, extra, where)
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and (
                properties or extra is False
            ):
                yield f"{where}: unknown field"


def built(kustomization: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(REPO / kustomization)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def check(crds: Path) -> dict[str, Any]:
    schemas = crd_schemas(crds)
    report: dict[str, Any] = {"validated": [], "not_checked": [], "errors": []}
    for kustomization in KUSTOMIZATIONS:
        for obj in built(kustomization):
            group, _, version = obj["apiVersion"].rpartition("/")
            name = f"{kustomization}: {obj['kind']} {obj['metadata']['name']} ({obj['apiVersion']})"
            schema = schemas.get((group, version, obj["kind"]))
            if schema is None:
                if group in BUILTIN_GROUPS:
                    report["not_checked"].append(name)
                else:
                    report["errors"].append(f"{name}: no CRD for it in {crds}")
                continue
            # What the API server itself owns (metadata, kind) is not the CRD's to say.
            own = ("apiVersion", "kind", "metadata")
            body = {k: v for k, v in obj.items() if k not in own}
            fields = {k: v for k, v in schema.get("properties", {}).items() if k not in own}
            problems = list(validate(body, {**schema, "properties": fields}))
            report["errors"].extend(f"{name}: {problem}" for problem in problems)
            report["validated"].append(name)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crds", type=Path, required=True, help="directory of CRD YAML files")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args(argv)
    report = check(args.crds)
    for line in report["validated"]:
        print(f"valid        {line}")
    for line in report["not_checked"]:
        print(f"not checked  {line}")
    for line in report["errors"]:
        print(f"ERROR        {line}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
