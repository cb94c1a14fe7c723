"""The example Kubernetes manifests (deploy/kubernetes) parse, and agree with the
sidecar config they ship: ports, probes, service names, secrets, the generated
Envoy bootstrap. They are not applied to a cluster here."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from e2e.container import CONFIG_PATH, IMAGE_UID, MODELS_DIR, STATE_DIR
from e2e.stack import BIN_DIR
from scripts.validate_manifests import built
from sidecar.config import ENV_OVERRIDES, SidecarConfig, load_config
from sidecar.envoy_config import render_yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
SIDECAR_YAML = DEPLOY / "config" / "sidecar.yaml"
ENVOY_YAML = DEPLOY / "config" / "envoy.yaml"
UPSTREAM = "http://vllm:8000"

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def config() -> SidecarConfig:
    return load_config(SIDECAR_YAML, env={})


@pytest.fixture(scope="module")
def kustomization() -> Doc:
    doc: Doc = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text(encoding="utf-8"))
    return doc


@pytest.fixture(scope="module")
def objects(kustomization: Doc) -> dict[tuple[str, str], Doc]:
    """Every object of the kustomization's resources, by (kind, name)."""
    found: dict[tuple[str, str], Doc] = {}
    for resource in kustomization["resources"]:
        for doc in yaml.safe_load_all((DEPLOY / resource).read_text(encoding="utf-8")):
            if doc is None:
                continue
            assert {"apiVersion", "kind", "metadata"} <= set(doc), resource
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in found, key
            found[key] = doc
    return found


def container(objects: dict[tuple[str, str], Doc], kind: str, name: str, image: str) -> Doc:
    spec = objects[(kind, name)]["spec"]["template"]["spec"]
    (found,) = [c for c in spec["containers"] if c["name"] == image]
    return dict(found)


def port_number(item: Doc, port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in item.get("ports", []) if p["name"] == port]
    return int(number)


def service_port(objects: dict[tuple[str, str], Doc], name: str) -> tuple[int, str]:
    (port,) = objects[("Service", name)]["spec"]["ports"]
    return int(port["port"]), str(port["targetPort"])


def test_every_file_parses_and_every_resource_is_listed(
    kustomization: Doc, objects: dict[tuple[str, str], Doc]
) -> None:
    listed = set(kustomization["resources"])
    on_disk = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    for path in DEPLOY.rglob("*.yaml"):
        list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    assert set(objects) == {
        ("Namespace", "llm-memory"),
        ("Secret", "memory-sidecar"),
        ("ConfigMap", "milvus-config"),
        ("StatefulSet", "milvus"),
        ("Service", "milvus"),
        ("Deployment", "vllm"),
        ("Service", "vllm"),
        ("Deployment", "llm-gateway"),
        ("Service", "llm-gateway"),
        ("PodDisruptionBudget", "llm-gateway"),
    }
    (generated,) = kustomization["configMapGenerator"]
    assert generated["name"] == "memory-sidecar-config"
    assert sorted(generated["files"]) == [
        "config/envoy.yaml",
        "config/jwks.json",
        "config/sidecar.yaml",
    ]
    volumes = objects[("Deployment", "llm-gateway")]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "config", "configMap": {"name": "memory-sidecar-config"}} in volumes


def test_envoy_bootstrap_is_generated_from_the_sidecar_config(config: SidecarConfig) -> None:
    assert render_yaml(config, UPSTREAM) == ENVOY_YAML.read_text(encoding="utf-8"), (
        "deploy/kubernetes/config/envoy.yaml is out of date: run scripts/gen_envoy_configs.sh"
    )


def test_sidecar_container_matches_its_config(
    config: SidecarConfig, objects: dict[tuple[str, str], Doc]
) -> None:
    sidecar = container(objects, "Deployment", "llm-gateway", "memory-sidecar")
    ready, live = sidecar["readinessProbe"]["httpGet"], sidecar["livenessProbe"]["httpGet"]
    assert ready["path"] == "/ready"
    assert live["path"] == "/healthz"
    assert port_number(sidecar, ready["port"]) == config.admin.port
    assert config.admin.host == "0.0.0.0"  # the kubelet probes the pod IP
    # The image's entrypoint serves the config at CONFIG_PATH: no command, no args.
    assert "command" not in sidecar
    assert "args" not in sidecar
    assert sidecar["image"] == "memory-sidecar"  # named by the kustomization's images:
    mounts = {m["mountPath"]: m for m in sidecar["volumeMounts"]}
    assert mounts[CONFIG_PATH]["subPath"] == "sidecar.yaml"
    assert mounts[STATE_DIR]["name"] == "state"
    assert config.write_queue.journal_path.startswith(STATE_DIR + "/")
    # The model files the image prepared at build time: nothing is exported at start.
    assert config.embedding.cache_dir == MODELS_DIR
    # Read-only root filesystem as the image's user; /tmp is a volume.
    security = sidecar["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == IMAGE_UID
    assert "/tmp" in mounts
    pod = objects[("Deployment", "llm-gateway")]["spec"]["template"]
    grace = config.server.shutdown_grace_s + config.write_queue.drain_timeout_s
    assert pod["spec"]["terminationGracePeriodSeconds"] > grace
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(config.admin.port)


def test_envoy_container_and_services_match_the_config(
    config: SidecarConfig, objects: dict[tuple[str, str], Doc]
) -> None:
    envoy = container(objects, "Deployment", "llm-gateway", "envoy")
    assert port_number(envoy, "http") == config.envoy.listen_port
    _, target = service_port(objects, "llm-gateway")
    assert port_number(envoy, target) == config.envoy.listen_port
    # Same pod: Envoy reaches the sidecar on loopback, where the sidecar listens.
    assert config.envoy.sidecar_host == "127.0.0.1" == config.server.host
    assert config.envoy.sidecar_port == config.server.port
    # The store and the LLM are the Services of this example.
    store = urlsplit(config.store.uri)
    assert (store.hostname, store.port) == ("milvus", service_port(objects, "milvus")[0])
    milvus = container(objects, "StatefulSet", "milvus", "milvus")
    assert port_number(milvus, service_port(objects, "milvus")[1]) == store.port
    assert config.llm.base_url is not None
    llm = urlsplit(config.llm.base_url)
    assert (llm.hostname, llm.port) == ("vllm", service_port(objects, "vllm")[0])
    assert f"http://{llm.hostname}:{llm.port}" == UPSTREAM
    assert config.store.partition_key  # the server setting this example recommends
    assert config.store.index == "FLAT"


def test_envoy_verifies_tokens_with_the_mounted_public_keys(
    config: SidecarConfig, objects: dict[tuple[str, str], Doc]
) -> None:
    # Client identity headers are never trusted: stripped, then set from the token.
    assert config.envoy.strip_identity_headers
    assert config.envoy.jwt is not None
    envoy = container(objects, "Deployment", "llm-gateway", "envoy")
    mounts = {m["mountPath"]: m for m in envoy["volumeMounts"]}
    assert mounts[config.envoy.jwt.jwks_file] == {
        "name": "config",
        "mountPath": config.envoy.jwt.jwks_file,
        "subPath": "jwks.json",
    }
    keys = json.loads((DEPLOY / "config" / "jwks.json").read_text(encoding="utf-8"))["keys"]
    assert keys
    for key in keys:  # public halves only: no private exponent, no symmetric secret
        assert key["kty"] == "RSA"
        assert not {"d", "p", "q", "k"} & set(key)


def test_secrets_are_the_documented_environment_overrides(
    objects: dict[tuple[str, str], Doc],
) -> None:
    secret = objects[("Secret", "memory-sidecar")]["stringData"]
    assert set(secret) <= set(ENV_OVERRIDES)
    sidecar = container(objects, "Deployment", "llm-gateway", "memory-sidecar")
    from_secret = {
        env["name"]: env["valueFrom"]["secretKeyRef"]
        for env in sidecar["env"]
        if "valueFrom" in env
    }
    assert set(from_secret) == set(secret)
    for name, ref in from_secret.items():
        assert ref == {"name": "memory-sidecar", "key": name}
    assert len(secret["SIDECAR_ADMIN_TOKEN"]) >= 16  # the placeholder itself would validate


@pytest.mark.e2e
@pytest.mark.skipif(not (BIN_DIR / "envoy").exists(), reason="needs the Envoy binary")
def test_envoy_accepts_the_kubernetes_bootstrap(config: SidecarConfig, tmp_path: Path) -> None:
    # The JWKS path is the container's; here it is the file the ConfigMap carries.
    assert config.envoy.jwt is not None
    bootstrap = tmp_path / "envoy.yaml"
    bootstrap.write_text(
        ENVOY_YAML.read_text(encoding="utf-8").replace(
            config.envoy.jwt.jwks_file, str(DEPLOY / "config" / "jwks.json")
        ),
        encoding="utf-8",
    )
    result = subprocess.run(
        [
            str(BIN_DIR / "envoy"),
            "--mode",
            "validate",
            "-c",
            str(bootstrap),
            "--disable-hot-restart",
            "--log-level",
            "warn",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout + result.stderr


def test_the_pods_disruption_budget_keeps_a_replica(objects: dict[tuple[str, str], Doc]) -> None:
    gateway = objects[("Deployment", "llm-gateway")]["spec"]
    budget = objects[("PodDisruptionBudget", "llm-gateway")]["spec"]
    assert budget["selector"] == gateway["selector"]
    assert 1 <= budget["minAvailable"] < gateway["replicas"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl (its kustomize)")
def test_kustomize_builds_with_the_image_override() -> None:
    docs = built("deploy/kubernetes")
    (gateway,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "llm-gateway"
    ]
    images = {c["name"]: c["image"] for c in gateway["spec"]["template"]["spec"]["containers"]}
    (override,) = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["images"]
    assert images["memory-sidecar"] == f"{override['newName']}:{override['newTag']}"
    assert all(d["metadata"].get("namespace") in (None, "llm-memory") for d in docs)
