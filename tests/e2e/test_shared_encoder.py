"""``embedding.shared`` through the real Envoy: two workers embed with one encoder
process. Memories are written and recalled through it; the encoder killed with
SIGKILL costs no client error (fail-open, counted) and comes back; SIGTERM stops it
with the workers."""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.stack import Stack, http_get, running_stack
from tests.e2e.test_workers import (
    alive,
    ask,
    children,
    requests_per_worker,
    served_by_each_worker,
    wait_for,
    worker_pids,
)

pytestmark = pytest.mark.e2e

WORKERS = 2


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    overrides: dict[str, Any] = {
        "server": {"workers": WORKERS},
        "embedding": {"shared": "on"},  # on CPU too (``auto`` shares on a GPU only)
        "cache": {"ttl_s": 0.5},
    }
    with running_stack(tmp_path_factory.mktemp("shared"), config_overrides=overrides) as running:
        yield running


def encoder_pid(stack: Stack) -> int:
    found = re.findall(
        r"shared encoder serving \d+-dimensional embeddings pid=(\d+)", stack.sidecar.tail(400)
    )
    assert found, "the shared encoder did not report"
    return int(found[-1])


def recall(stack: Stack, user: str, fact: str, question: str, word: str) -> None:
    written = stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "written"})
    assert ask(stack, user, fact)[0] == 200
    wait_for(
        lambda: stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "written"}) > written
    )
    time.sleep(1.0)  # every worker's cache refresh has run
    # Until each worker has answered (least request over idle workers picks at random:
    # six questions in a row once all went to one worker).
    for echo in served_by_each_worker(stack, user, question, 1):
        assert word in echo


def test_workers_embed_with_one_encoder(stack: Stack) -> None:
    encoder = encoder_pid(stack)
    assert stack.sidecar.process is not None
    assert encoder in children(stack.sidecar.process.pid)
    assert len(worker_pids(stack)) == WORKERS + 1  # the workers and the encoder
    before = requests_per_worker(stack)
    recall(stack, f"ivy-{uuid.uuid4().hex[:6]}", "I live in Lisbon.", "Where do I live?", "Lisbon")
    assert all(b > a for a, b in zip(before, requests_per_worker(stack), strict=True))


def encoder_metric(stack: Stack, name: str) -> float:
    status, body = http_get(f"http://127.0.0.1:{stack.ports.sidecar_admin + WORKERS}/metrics")
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in the encoder's metrics")


def test_the_encoder_reports_its_own_metrics(stack: Stack) -> None:
    """On the admin port after the workers': model calls, texts, connected workers."""
    texts = encoder_metric(stack, "memory_sidecar_encoder_texts_total")
    ask(stack, f"kim-{uuid.uuid4().hex[:6]}", "What do you know about me?")
    assert encoder_metric(stack, "memory_sidecar_encoder_texts_total") > texts
    assert encoder_metric(stack, "memory_sidecar_encoder_batches_total") >= 1
    assert encoder_metric(stack, "memory_sidecar_encoder_connections") == WORKERS
    assert encoder_metric(stack, "memory_sidecar_encoder_rejected_total") == 0


def test_a_killed_encoder_costs_no_client_error_and_comes_back(stack: Stack) -> None:
    victim = encoder_pid(stack)
    failed_open = stack.sidecar_metric("memory_sidecar_fail_open_total")
    os.kill(victim, signal.SIGKILL)
    statuses = [ask(stack, f"during-{i}", "Hello there")[0] for i in range(20)]
    assert statuses == [200] * 20  # answered without memory meanwhile
    assert stack.sidecar_metric("memory_sidecar_fail_open_total") > failed_open
    wait_for(lambda: encoder_pid(stack) != victim, timeout=90)
    assert "the shared encoder exited" in stack.sidecar.tail(400)
    user = f"jon-{uuid.uuid4().hex[:6]}"
    deadline = time.monotonic() + 60
    while True:  # the workers reconnect on their next embedding
        try:
            recall(stack, user, "I play the cello.", "Which instrument do I play?", "cello")
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def test_sigterm_stops_the_encoder_with_the_workers(stack: Stack) -> None:
    assert stack.sidecar.process is not None
    family = children(stack.sidecar.process.pid)
    assert encoder_pid(stack) in family
    assert stack.sidecar.stop(timeout=60) == 0
    wait_for(lambda: not any(alive(pid) for pid in family), timeout=10)
