"""Forget means gone: after a user is forgotten and the sidecar is killed with
SIGKILL, no file under the stack's directory (store, journal and its WAL, logs)
holds a word the user said."""

from __future__ import annotations

import signal
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.stack import Stack, running_stack

pytestmark = pytest.mark.e2e

TOKEN = "forget-e2e-admin-token-0123456789"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(
        tmp_path_factory.mktemp("forget"), config_overrides={"admin": {"token": TOKEN}}
    ) as running:
        yield running


def files_holding(root: Path, needle: bytes) -> list[str]:
    return [
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file() and needle in path.read_bytes()
    ]


def test_a_forgotten_users_words_are_in_no_file_after_a_kill(stack: Stack) -> None:
    user, secret = f"forget-{uuid.uuid4().hex[:6]}", f"zq{uuid.uuid4().hex[:10]}"
    before = stack.turns_written()
    for said in (f"My locker code is {secret}.", f"I keep the {secret} notes in the attic."):
        stack.client(user).chat.completions.create(
            model="mock-llm", messages=[{"role": "user", "content": said}]
        )
    assert stack.wait_turns_written(before + 2)
    assert files_holding(stack.workdir, secret.encode())  # it was on disk
    request = urllib.request.Request(
        f"{stack.sidecar_admin_url}/v1/admin/users/{user}",
        method="DELETE",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
    assert stack.sidecar.process is not None
    stack.sidecar.process.send_signal(signal.SIGKILL)
    stack.sidecar.process.wait()
    try:
        assert files_holding(stack.workdir, secret.encode()) == []
    finally:
        stack.restart_sidecar()
