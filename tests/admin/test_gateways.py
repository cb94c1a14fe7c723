"""The gateway examples (deploy/gateways): the sidecar as its own Deployment, attached
to Envoy Gateway (EnvoyExtensionPolicy) and to Istio (EnvoyFilter). They are not
applied to a cluster here; what is checked:

* each kustomization builds (``kubectl kustomize``, where kubectl is installed);
* they wire what the Envoy bootstrap this project renders wires: the client's
  identity headers removed before any filter, then set from a verified JWT; ext_proc
  with the same processing modes, timeout and fail-open, calling the sidecar's port;
  each route served by the profile its path selects;
* the Envoy configuration inside Istio's EnvoyFilter is accepted by the real Envoy;
* the custom resources match their CRD schemas, where ``SIDECAR_CRDS_DIR`` names a
  directory of those CRDs (``scripts/validate_manifests.py`` does the same by hand;
  the CRDs are not part of this repository).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.container import CONFIG_PATH, MODELS_DIR
from e2e.stack import BIN_DIR
from scripts.validate_manifests import KUSTOMIZATIONS, built, check, validate
from sidecar.config import SidecarConfig, load_config
from sidecar.envoy_config import render_yaml

ROOT = Path(__file__).resolve().parents[2]
GATEWAYS = ROOT / "deploy" / "gateways"
SIDECAR = GATEWAYS / "sidecar"

Doc = dict[str, Any]


def docs(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def one(path: Path, kind: str) -> Doc:
    (found,) = [d for d in docs(path) if d["kind"] == kind]
    return found


@pytest.fixture(scope="module")
def config() -> SidecarConfig:
    return load_config(SIDECAR / "config" / "sidecar.yaml", env={})


@pytest.fixture(scope="module")
def rendered(config: SidecarConfig) -> Doc:
    """The ext_proc filter of the bootstrap ``sidecar envoy-config`` renders."""
    bootstrap = yaml.safe_load(render_yaml(config, "http://vllm:8000"))
    (listener,) = bootstrap["static_resources"]["listeners"]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    (ext_proc,) = [f for f in manager["http_filters"] if f["name"] == "envoy.filters.http.ext_proc"]
    return dict(ext_proc["typed_config"])


def identity_headers(config: SidecarConfig) -> set[str]:
    identity = config.defaults.identity
    return {identity.user_header, identity.groups_header, identity.session_header}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl (its kustomize)")
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_kustomization_builds(kustomization: str) -> None:
    kinds = {d["kind"] for d in built(kustomization)}
    assert {"Deployment", "Service", "PodDisruptionBudget"} <= kinds


def test_the_sidecar_deployment_runs_the_image_beside_a_shared_store(config: SidecarConfig) -> None:
    deployment = one(SIDECAR / "sidecar.yaml", "Deployment")
    assert deployment["spec"]["replicas"] >= 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "memory-sidecar"
    assert "args" not in container
    assert "command" not in container
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": config.server.port, "admin": config.admin.port}
    assert config.server.host == config.admin.host == "0.0.0.0"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {CONFIG_PATH, "/var/lib/memory-sidecar", "/tmp"} <= mounts
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert config.embedding.cache_dir == MODELS_DIR
    assert config.store.uri.startswith("http://milvus:")  # one server, every replica
    budget = one(SIDECAR / "sidecar.yaml", "PodDisruptionBudget")
    assert 1 <= budget["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    (port,) = one(SIDECAR / "sidecar.yaml", "Service")["spec"]["ports"]
    assert (port["port"], port["name"]) == (config.server.port, "grpc")
    policy = one(SIDECAR / "sidecar.yaml", "NetworkPolicy")
    grpc_rule = next(r for r in policy["spec"]["ingress"] if "from" in r)
    assert grpc_rule["ports"] == [{"port": config.server.port, "protocol": "TCP"}]


def test_envoy_gateway_strips_identity_then_sets_it_from_the_token(config: SidecarConfig) -> None:
    policies = GATEWAYS / "envoy-gateway" / "policies.yaml"
    early = one(policies, "ClientTrafficPolicy")["spec"]["headers"]["earlyRequestHeaders"]
    assert set(early["remove"]) == identity_headers(config)
    (provider,) = one(policies, "SecurityPolicy")["spec"]["jwt"]["providers"]
    set_from_token = {c["header"]: c["claim"] for c in provider["claimToHeaders"]}
    identity = config.defaults.identity
    assert set_from_token == {identity.user_header: "sub", identity.groups_header: "groups"}


def test_envoy_gateway_ext_proc_matches_the_rendered_bootstrap(
    config: SidecarConfig, rendered: Doc
) -> None:
    policy = one(GATEWAYS / "envoy-gateway" / "policies.yaml", "EnvoyExtensionPolicy")["spec"]
    route = one(GATEWAYS / "envoy-gateway" / "gateway.yaml", "HTTPRoute")
    assert policy["targetRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "HTTPRoute",
            "name": route["metadata"]["name"],
        }
    ]
    (ext_proc,) = policy["extProc"]
    assert ext_proc["backendRefs"] == [{"name": "memory-sidecar", "port": config.server.port}]
    mode = rendered["processing_mode"]
    names = {"BUFFERED": "Buffered", "STREAMED": "Streamed"}
    assert ext_proc["processingMode"]["request"]["body"] == names[mode["request_body_mode"]]
    assert ext_proc["processingMode"]["response"]["body"] == names[mode["response_body_mode"]]
    assert ext_proc["processingMode"]["allowModeOverride"] is rendered["allow_mode_override"]
    assert ext_proc["failOpen"] is rendered["failure_mode_allow"]
    assert ext_proc["messageTimeout"] == rendered["message_timeout"]


def test_istio_strips_identity_then_sets_it_from_the_token(config: SidecarConfig) -> None:
    istio = GATEWAYS / "istio" / "istio.yaml"
    strip, _, _ = one(istio, "EnvoyFilter")["spec"]["configPatches"]
    assert strip["patch"]["operation"] == "INSERT_FIRST"
    removed = {
        m["remove"]
        for m in strip["patch"]["value"]["typed_config"]["mutations"]["request_mutations"]
    }
    assert removed == identity_headers(config)
    (rule,) = one(istio, "RequestAuthentication")["spec"]["jwtRules"]
    set_from_token = {c["header"]: c["claim"] for c in rule["outputClaimToHeaders"]}
    identity = config.defaults.identity
    assert set_from_token == {identity.user_header: "sub", identity.groups_header: "groups"}
    deny = one(istio, "AuthorizationPolicy")["spec"]
    assert deny["action"] == "DENY"
    assert deny["rules"][0]["from"][0]["source"]["notRequestPrincipals"] == ["*"]
    # The policies and the filter act on the ingress gateway's pods, in its namespace.
    for kind in ("RequestAuthentication", "AuthorizationPolicy", "EnvoyFilter"):
        assert one(istio, kind)["metadata"]["namespace"] == "istio-system"


def test_istio_ext_proc_is_the_rendered_one(config: SidecarConfig, rendered: Doc) -> None:
    _, insert, _ = one(GATEWAYS / "istio" / "istio.yaml", "EnvoyFilter")["spec"]["configPatches"]
    assert insert["patch"]["operation"] == "INSERT_BEFORE"
    assert insert["match"]["listener"]["filterChain"]["filter"]["subFilter"] == {
        "name": "envoy.filters.http.router"
    }
    typed = dict(insert["patch"]["value"]["typed_config"])
    cluster = typed["grpc_service"]["envoy_grpc"].pop("cluster_name")
    assert cluster == f"outbound|{config.server.port}||memory-sidecar.llm-memory.svc.cluster.local"
    rendered = dict(rendered)
    rendered["grpc_service"] = {**rendered["grpc_service"], "envoy_grpc": {}}
    assert typed == rendered


@pytest.mark.parametrize(
    ("routes", "kind"),
    [("envoy-gateway/gateway.yaml", "HTTPRoute"), ("istio/istio.yaml", "VirtualService")],
)
def test_each_route_is_served_by_the_profile_its_path_selects(
    config: SidecarConfig, routes: str, kind: str
) -> None:
    route = one(GATEWAYS / routes, kind)["spec"]
    if kind == "HTTPRoute":
        prefixes = {r["name"]: r["matches"][0]["path"]["value"] for r in route["rules"]}
    else:
        prefixes = {r["name"]: r["match"][0]["uri"]["prefix"] for r in route["http"]}
    assert set(prefixes) == {"readonly", "default"}
    readonly, default = config.profile("readonly"), config.profile("default")
    assert readonly is not None
    assert default is not None
    # ext_proc sees the path before the route's rewrite.
    assert f"{prefixes['readonly']}chat/completions" in readonly.paths
    assert f"{prefixes['readonly']}chat/completions" not in default.paths
    assert f"{prefixes['default']}chat/completions" in default.paths
    assert not readonly.extraction.enabled


@pytest.mark.e2e
@pytest.mark.skipif(not (BIN_DIR / "envoy").exists(), reason="needs the Envoy binary")
def test_envoy_accepts_the_istio_filters(tmp_path: Path) -> None:
    strip, insert, listener = one(GATEWAYS / "istio" / "istio.yaml", "EnvoyFilter")["spec"][
        "configPatches"
    ]
    ext_proc = insert["patch"]["value"]
    cluster = ext_proc["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"]
    bootstrap = {
        "static_resources": {
            "listeners": [
                {
                    "name": "gateway",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
                    **listener["patch"]["value"],
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.filters"
                                        ".network.http_connection_manager.v3.HttpConnectionManager",
                                        "stat_prefix": "gateway",
                                        "route_config": {"name": "none"},
                                        "http_filters": [
                                            strip["patch"]["value"],
                                            ext_proc,
                                            {
                                                "name": "envoy.filters.http.router",
                                                "typed_config": {
                                                    "@type": "type.googleapis.com/envoy.extensions"
                                                    ".filters.http.router.v3.Router"
                                                },
                                            },
                                        ],
                                    },
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                {
                    "name": cluster,
                    "type": "STATIC",
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3"
                            ".HttpProtocolOptions",
                            "explicit_http_config": {"http2_protocol_options": {}},
                        }
                    },
                    "load_assignment": {"cluster_name": cluster, "endpoints": []},
                }
            ],
        }
    }
    path = tmp_path / "envoy.yaml"
    path.write_text(yaml.safe_dump(bootstrap), encoding="utf-8")
    result = subprocess.run(
        [str(BIN_DIR / "envoy"), "--mode", "validate", "-c", str(path), "--disable-hot-restart"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_finds_unknown_fields_bad_values_and_missing_ones() -> None:
    schema = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z]+$"},
            "mode": {"type": "string", "enum": ["Buffered", "Streamed"]},
            "items": {"type": "array", "maxItems": 1, "items": {"type": "integer"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    assert list(validate({"name": "ok", "mode": "Buffered", "free": {"x": 1}}, schema)) == []
    problems = list(
        validate({"mode": "Bufferd", "items": [1, "2"], "nmae": "x", "free": {}}, schema)
    )
    assert sorted(problems) == [
        ": missing required field 'name'",
        "items: more than 1 items",
        "items[1]: expected integer, got str",
        "mode: 'Bufferd' is not one of ['Buffered', 'Streamed']",
        "nmae: unknown field",
    ]


@pytest.mark.skipif(
    not os.environ.get("SIDECAR_CRDS_DIR") or shutil.which("kubectl") is None,
    reason="set SIDECAR_CRDS_DIR to a directory of Envoy Gateway's, the Gateway API's and "
    "Istio's CRDs (and install kubectl) to check the manifests against them",
)
def test_custom_resources_match_their_crds() -> None:
    report = check(Path(os.environ["SIDECAR_CRDS_DIR"]))
    assert report["errors"] == []
    assert len(report["validated"]) >= 10
