"""The generated documents are committed and kept in sync: the configuration
reference (docs/configuration.md) and the admin API's OpenAPI document
(docs/admin-openapi.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import get_args

from pydantic import BaseModel

from sidecar.admin.openapi import build_openapi, render_openapi
from sidecar.config import ENV_OVERRIDES, SUPERVISOR_SETTINGS, SidecarConfig, StrategyName
from sidecar.config.reference import EXPERIMENTAL_TITLE, render_reference, sections

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


#: What the experimental section holds (sidecar/config/experimental.py).
EXPERIMENTAL = {
    "server.gc_freeze_interval_s",
    "server.gc_thaw_interval_s",
    "embedding.batch_wait_ms",
    "hierarchy.embedding",
    "llm.transport",
    "defaults.retrieval.hybrid.fusion",
    "defaults.retrieval.hybrid.ngram_weight",
    "defaults.retrieval.hybrid.rrf_k",
    "defaults.retrieval.hybrid.ngram_pool",
    *(
        f"defaults.retrieval.associative.{key}"
        for key in (
            "enabled",
            "hop_limit",
            "beam_width",
            "min_cosine",
            "hop_decay",
            "seeds",
            "max_visits",
            "same_scope_bonus",
        )
    ),
    *(
        f"defaults.retrieval.hierarchy.{key}"
        for key in (
            "alpha",
            "broad_threshold",
            "broad_categories",
            "member_evidence",
            "convergence_rounds",
            "max_rounds",
        )
    ),
    "defaults.retrieval.tiered.min_results",
    "defaults.retrieval.tiered.min_avg_score",
    "defaults.rewrite.search",
}


def test_experimental_settings_are_in_one_section_of_their_own() -> None:
    found = sections()
    (experimental,) = [s for s in found if s.title == EXPERIMENTAL_TITLE]
    assert found[-1] is experimental
    assert {s.path for s in experimental.settings} == EXPERIMENTAL
    for setting in experimental.settings:
        assert setting.description.startswith("Experimental: "), setting
    elsewhere = {
        s.path for section in found if section is not experimental for s in section.settings
    }
    assert not elsewhere & EXPERIMENTAL
    # No section is left for the wholly experimental models; the page names them.
    assert not {"defaults.retrieval.associative", "defaults.retrieval.tiered"} & {
        s.path for s in found
    }
    page = render_reference()
    assert page.count(f"## {EXPERIMENTAL_TITLE}") == 1
    assert "- `defaults.retrieval.associative`: " in page


def test_strategy_description_says_which_strategies_are_for_production() -> None:
    documented = {s.path: s for section in sections() for s in section.settings}
    text = documented["defaults.retrieval.strategy"].description
    production, baselines = text.split("Evaluation baselines")
    assert "`default`" in production
    assert "`dense`" in baselines
    for name in get_args(StrategyName):
        assert f"`{name}`" in text, name


def test_descriptions_say_what_and_why_not_what_a_run_measured() -> None:
    """Measurements belong in docs/benchmarks.md and docs/design/, where they are dated."""
    for section in sections():
        for text in (section.description, *(s.description for s in section.settings)):
            assert "README" not in text, text
            assert not re.search(r"(?i)\bmeasured\b[ :(]", text), text


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
    assert len(operations) == 14
    for path, method in operations:
        responses = document["paths"][path][method]["responses"]
        assert {"400", "401", "403", "503"} <= set(responses), (path, method)
