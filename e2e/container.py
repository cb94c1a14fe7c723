"""The sidecar as a container (``Containerfile``), driven by podman.

For the container test (tests/container) and ``scripts/container/test.sh``: build
the image with ``scripts/container/build.sh``, make a named volume for its state,
and run the image in the foreground as a :class:`~e2e.stack.ManagedProcess`, so a
:class:`~e2e.stack.Stack` starts, stops (SIGTERM, which ``podman run`` hands to the
container) and reads its exit code exactly as it does a local sidecar's. The
container shares the host's network: Envoy and the mock LLM stay on loopback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from e2e.stack import REPO_ROOT, ManagedProcess

#: Where the image keeps its state (a volume) and reads its config.
STATE_DIR = "/var/lib/memory-sidecar"
CONFIG_PATH = "/etc/memory-sidecar/sidecar.yaml"
#: The ONNX files the image prepared at build time.
MODELS_DIR = "/opt/memory-sidecar/models"
BUILD_SCRIPT = REPO_ROOT / "scripts" / "container" / "build.sh"
CONTAINERS_CONF = REPO_ROOT / "scripts" / "container" / "containers.conf"
#: The image's user (Containerfile).
IMAGE_UID = 10001


def podman_env() -> dict[str, str]:
    """The environment podman runs with: this project's containers.conf unless the
    caller set one (scripts/container/containers.conf says why)."""
    return {
        **os.environ,
        "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(CONTAINERS_CONF)),
    }


def podman_missing() -> str | None:
    """Why containers cannot run here, or None."""
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman buildah runc debootstrap)"
    probe = subprocess.run(
        ["podman", "info"], env=podman_env(), capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return f"podman cannot run here: {probe.stderr.strip()[-300:]}"
    return None


def podman(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args],
        env=podman_env(),
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
    )


def build_image(tag: str, *, local_base: bool, log: Path, timeout: float = 1800) -> None:
    """``scripts/container/build.sh`` (its output in ``log``); raises on failure."""
    args = [str(BUILD_SCRIPT), "--tag", tag, *(["--local-base"] if local_base else [])]
    with log.open("wb") as out:
        done = subprocess.run(
            args, env=podman_env(), stdout=out, stderr=subprocess.STDOUT, timeout=timeout
        )
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"building {tag} failed ({done.returncode}):\n{tail}")


def container_sidecar(
    image: str,
    name: str,
    volume: str,
    config: Path,
    log: Path,
    extra: Sequence[str] = (),
) -> ManagedProcess:
    """``podman run`` of ``image`` in the foreground: read-only root filesystem, the
    host's network, ``volume`` as its state directory and ``config`` as its config."""
    args = [
        "podman",
        "run",
        "--rm",
        "--name",
        name,
        "--read-only",
        "--network",
        "host",
        "--volume",
        f"{volume}:{STATE_DIR}",
        "--volume",
        f"{config}:{CONFIG_PATH}:ro",
        *extra,
        image,
    ]
    return ManagedProcess("sidecar-container", args, log, env=podman_env())
