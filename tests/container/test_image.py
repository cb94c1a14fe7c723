"""The container image (Containerfile), built and run with podman, serving the e2e
scenario through the real Envoy outside it.

Marked ``container``: not in the default run (building the image takes minutes the
first time). Run by ``scripts/container/test.sh``, which CI calls where podman is
installed. Skips, saying why, where podman is missing or cannot run containers.

The image is built from this checkout by ``scripts/container/build.sh`` (tag
``localhost/memory-sidecar:test``) from the local Debian base
(``scripts/container/base.sh``: no registry is reachable from CI);
``SIDECAR_TEST_IMAGE`` names an image built already instead.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.container import (
    CONFIG_PATH,
    IMAGE_UID,
    MODELS_DIR,
    STATE_DIR,
    build_image,
    container_sidecar,
    podman,
    podman_missing,
)
from e2e.scenario import injected_block, run_scenario
from e2e.stack import Stack

pytestmark = [pytest.mark.container, pytest.mark.e2e]

TEST_TAG = "localhost/memory-sidecar:test"
#: The base scripts/container/base.sh makes (no registry is reachable from CI).
LOCAL_BASE = "localhost/memory-sidecar-base:bookworm"


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    missing = podman_missing()
    if missing is not None:
        pytest.skip(f"container test skipped: {missing}")
    given = os.environ.get("SIDECAR_TEST_IMAGE")
    if given:
        return given
    base = podman("image", "exists", LOCAL_BASE, check=False).returncode == 0
    if not base and shutil.which("debootstrap") is None:
        pytest.skip(
            f"container test skipped: no {LOCAL_BASE} image and no debootstrap to make it "
            "(apt-get install debootstrap), or set SIDECAR_TEST_IMAGE"
        )
    log = tmp_path_factory.mktemp("image") / "build.log"
    build_image(TEST_TAG, local_base=True, log=log)
    return TEST_TAG


@pytest.fixture
def volume() -> Iterator[str]:
    name = f"sidecar-test-{uuid.uuid4().hex[:8]}"
    podman("volume", "create", name)
    yield name
    podman("volume", "rm", "--force", name, check=False)


def _stack(workdir: Path, image: str, volume: str, name: str) -> Stack:
    """The e2e stack (mock LLM and Envoy on this host) with the image as its sidecar."""
    stack = Stack(
        workdir,
        config_overrides={
            "store": {"uri": f"{STATE_DIR}/memory.db"},
            "write_queue": {"journal_path": f"{STATE_DIR}/journal.sqlite3"},
            "embedding": {"cache_dir": MODELS_DIR},
        },
    )
    stack.sidecar = container_sidecar(
        image, name, volume, stack.config_path, workdir / "sidecar.log"
    )
    return stack


def _say(stack: Stack, user: str, text: str) -> str:
    """One turn as ``user`` through Envoy; what the model echoed back."""
    reply = stack.client(user).chat.completions.create(
        model="mock-llm", messages=[{"role": "user", "content": text}]
    )
    return reply.choices[0].message.content or ""


def test_image_serves_the_scenario_survives_a_restart_and_stops_cleanly(
    image: str, volume: str, tmp_path: Path
) -> None:
    name = f"sidecar-test-{uuid.uuid4().hex[:8]}"
    stack = _stack(tmp_path, image, volume, name)
    try:
        stack.start(timeout=180)

        # What the container runs as, and that it can write nowhere but its volume.
        assert podman("exec", name, "id", "-u").stdout.strip() == str(IMAGE_UID)
        assert (
            podman("inspect", name, "--format", "{{.HostConfig.ReadonlyRootfs}}").stdout.strip()
            == "true"
        )
        denied = podman("exec", name, "touch", "/opt/memory-sidecar/x", check=False)
        assert denied.returncode != 0
        assert "Read-only file system" in denied.stderr
        assert podman("healthcheck", "run", name, check=False).returncode == 0
        # The model was prepared in the image: nothing was exported at start.
        assert "exported the embedding model" not in stack.sidecar.tail(400)

        report = run_scenario(stack, say=lambda _line: None)
        assert not report.failed, [(c.name, c.detail) for c in report.failed]

        # One user's turn written before the stop, another's accepted just before
        # SIGTERM: the drain writes it, and the container exits 0.
        written = stack.turns_written()
        _say(stack, "dave", "My daughter is called Mira.")
        assert stack.wait_turns_written(written + 1)
        _say(stack, "carol", "I live in Lisbon and I play the cello.")
        assert stack.sidecar.stop(timeout=90) == 0, stack.sidecar.tail()
        assert "write queue drained" in stack.sidecar.tail(400)

        # A new container on the same volume: both memories are there.
        stack.sidecar.start()
        stack.wait_sidecar(180)
        assert "0 turns to write" in stack.sidecar.tail(400)
        for user, question, fact in (
            ("dave", "What is my daughter called?", "Mira"),
            ("carol", "Where do I live?", "Lisbon"),
        ):
            echo = _say(stack, user, question)
            assert fact in injected_block(echo), echo[:500]
    finally:
        codes = stack.stop()
    assert codes["sidecar"] == 0


def test_config_path_is_the_images(image: str) -> None:
    """The image's own config is valid for this version of the sidecar."""
    shown = podman(
        "run",
        "--rm",
        "--read-only",
        "--entrypoint",
        "sidecar",
        image,
        "config",
        "check",
        CONFIG_PATH,
    )
    assert f"{STATE_DIR}/memory.db" in shown.stdout
