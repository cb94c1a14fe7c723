"""``write_queue.own_process`` through the real Envoy: one worker and its writer
process. A stated fact is written by the writer, not the worker, and the worker
serves it on the next question at once — over the relay, since its cache refresh
(``cache.ttl_s``, 30 s) has not run; the writer killed with SIGKILL costs no client
error and no accepted turn (those accepted meanwhile are written once it is back);
SIGTERM stops worker, writer and store server."""

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
from tests.e2e.test_workers import alive, ask, children, wait_for, worker_pids

pytestmark = pytest.mark.e2e

WRITTEN = ("memory_sidecar_turns_total", {"outcome": "written"})
ACCEPTED = ("memory_sidecar_turns_total", {"outcome": "accepted"})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    overrides: dict[str, Any] = {"write_queue": {"own_process": True}}
    with running_stack(tmp_path_factory.mktemp("writer"), config_overrides=overrides) as running:
        # The worker is ready (what the stack waits for) before its writer is.
        wait_for(lambda: writer_pids(running) != [], timeout=90)
        yield running


def writer_pids(stack: Stack) -> list[int]:
    found = re.findall(r"writer 0 writing turns pid=(\d+)", stack.sidecar.tail(400))
    return [int(pid) for pid in found]


def writer_pid(stack: Stack) -> int:
    found = writer_pids(stack)
    assert found, "the writer did not report"
    return found[-1]


def relay_frames(stack: Stack, kind: str, outcome: str) -> float:
    return stack.sidecar_metric(
        "memory_sidecar_cache_relay_frames_total", {"kind": kind, "outcome": outcome}
    )


def test_the_writer_writes_and_the_worker_serves_at_once(stack: Stack) -> None:
    assert stack.sidecar.process is not None
    pids = worker_pids(stack)
    assert len(pids) == 2
    assert writer_pid(stack) in pids
    status, _ = http_get(f"{stack.writer_metrics_urls[0]}/metrics")
    assert status == 200

    user = f"lena-{uuid.uuid4().hex[:6]}"
    received = relay_frames(stack, "apply", "received")
    assert ask(stack, user, "I live in Lisbon and I play the cello.")[0] == 200
    wait_for(lambda: stack.writer_metric(*WRITTEN) >= 1, timeout=30)
    assert stack.sidecar_metric(*WRITTEN) == 0  # the worker only accepted it
    assert stack.sidecar_metric(*ACCEPTED) >= 1
    wait_for(lambda: relay_frames(stack, "apply", "received") > received, timeout=10)
    assert "Lisbon" in ask(stack, user, "Where do I live?")[1]
    assert relay_frames(stack, "wake", "sent") >= 1


def test_a_killed_writer_costs_no_client_error_and_no_turn(stack: Stack) -> None:
    victim = writer_pid(stack)
    accepted = stack.sidecar_metric(*ACCEPTED)
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: not alive(victim), timeout=10)
    users = [f"moe-{i}-{uuid.uuid4().hex[:6]}" for i in range(8)]
    statuses = [ask(stack, user, "My favourite colour is teal.")[0] for user in users]
    assert statuses == [200] * len(users)  # the worker answers and journals them
    assert stack.sidecar_metric(*ACCEPTED) == accepted + len(users)

    wait_for(lambda: writer_pid(stack) != victim, timeout=90)
    assert "writer 0 exited" in stack.sidecar.tail(400)
    # The new writer writes every turn accepted while none ran.
    wait_for(lambda: stack.writer_metric(*WRITTEN) >= len(users), timeout=60)
    wait_for(lambda: stack.sidecar_metric("memory_sidecar_write_queue_depth") == 0, timeout=30)
    time.sleep(0.5)  # the last rows' relay frames
    for user in users:
        assert "teal" in ask(stack, user, "What is my favourite colour?")[1]


def test_sigterm_stops_worker_writer_and_store(stack: Stack) -> None:
    assert stack.sidecar.process is not None
    family = children(stack.sidecar.process.pid)
    assert writer_pid(stack) in family
    assert stack.sidecar.stop(timeout=60) == 0
    wait_for(lambda: not any(alive(pid) for pid in family), timeout=10)
    assert "writer 0 drained" in stack.sidecar.tail(100)
