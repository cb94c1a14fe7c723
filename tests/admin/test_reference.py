"""The generated documents are committed and kept in sync: the configuration
reference (docs/configuration.md) and the admin API's OpenAPI document
(docs/admin-openapi.json)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from sidecar.admin.openapi import build_openapi, render_openapi
from sidecar.config import ENV_OVERRIDES, SUPERVISOR_SETTINGS, SidecarConfig
from sidecar.config.reference import render_reference, sections

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_configuration_reference_is_up_to_date() -> None:
    committed = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert render_reference() == committed, (
        "docs/configuration.md is out of date with sidecar/config/: run "
        ".venv/bin/sidecar config reference > docs/configuration.md"
    )


def _leaf_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    found: set[str] = set()
    for name, info in model.model_fields.items():
        key = info.alias or name
        path = f"{prefix}{key}"
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found |= _leaf_paths(annotation, path + ".")
        else:
            found.add(path)
    return found


def test_reference_documents_every_setting_with_type_and_default() -> None:
    documented = {s.path: s for section in sections() for s in section.settings}
    expected = {p for p in _leaf_paths(SidecarConfig) if not p.startswith("envoy.routes")}
    expected.discard("admin.tokens")
    expected -= set(SUPERVISOR_SETTINGS)  # set by the supervisor, not read from the file
    missing = {p for p in expected if p not in documented}
    assert not missing, sorted(missing)
    assert not set(SUPERVISOR_SETTINGS) & set(documented)
    for setting in documented.values():
        assert all((setting.type, setting.default, setting.description)), setting
    # Nested lists of sections are documented per item.
    assert "envoy.routes[].prefix" in documented
    assert "admin.tokens[].users" in documented
    # Descriptions come from the #: comments next to the defaults.
    assert "partition key" in documented["store.partition_key"].description
    assert documented["store.index"].default == '`"FLAT"`'
    assert documented["server.port"].default == "`50051`"
    assert documented["admin.token"].default == "unset"


def test_reference_documents_the_environment_overrides() -> None:
    page = render_reference()
    for var, path in ENV_OVERRIDES.items():
        assert f"| `{var}` | `{path}` |" in page
        assert f"Environment: `{var}`" in page


def test_openapi_document_is_up_to_date() -> None:
    committed = (DOCS / "admin-openapi.json").read_text(encoding="utf-8")
    assert render_openapi() == committed, (
        "docs/admin-openapi.json is out of date: run "
        ".venv/bin/sidecar admin openapi > docs/admin-openapi.json"
    )


def test_openapi_references_resolve() -> None:
    document = build_openapi()
    assert document["openapi"].startswith("3.")
    schemas = document["components"]["schemas"]
    text = json.dumps(document)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "')[1:]}:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    operations = [
        (path, method) for path, methods in document["paths"].items() for method in methods
    ]
    assert len(operations) == 10
    for path, method in operations:
        responses = document["paths"][path][method]["responses"]
        assert {"400", "401", "403", "503"} <= set(responses), (path, method)
