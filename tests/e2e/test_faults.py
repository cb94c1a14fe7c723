"""Fault injection through the real Envoy: a frozen sidecar (past Envoy's
message_timeout), the store process killed, the LLM down, slow or talking garbage.
Fail-open routes: zero client errors and counters that move. Fail-closed routes: a
clear error. No accepted turn lost."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.stack import Stack, http_get, running_stack
from tests.test_alerts import ENVOY_SERIES

pytestmark = pytest.mark.e2e

ROUTES = [
    {"prefix": "/closed/v1/", "rewrite": "/v1/", "profile": "closed"},
    {"prefix": "/", "profile": "default"},
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir: Path = tmp_path_factory.mktemp("faults")
    overrides: dict[str, Any] = {
        "profiles": {
            "closed": {"paths": ["/closed/v1/chat/completions"], "fail_open": False},
        },
        "llm": {"timeout_s": 1.0},
        "write_queue": {"retry_base_s": 0.2, "retry_max_s": 1.0},
        "envoy": {"routes": ROUTES},
    }
    with running_stack(workdir, config_overrides=overrides) as running:
        yield running


def ask(stack: Stack, user: str, text: str, prefix: str = "/v1") -> tuple[int, dict[str, Any]]:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()
    request = urllib.request.Request(
        stack.route_url(prefix) + "/chat/completions",
        data=body,
        headers={"content-type": "application/json", "x-user-id": user},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def set_mock(stack: Stack, **config: Any) -> None:
    request = urllib.request.Request(
        f"{stack.mock_url}/_mock/config",
        data=json.dumps(config).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


def metric(stack: Stack, name: str, **labels: str) -> float:
    return stack.sidecar_metric(name, labels)


def wait_for(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def injected(answer: dict[str, Any]) -> str:
    text = str(answer["choices"][0]["message"]["content"])
    start, end = text.find("<memory>"), text.find("</memory>")
    return text[start:end] if 0 <= start < end else ""


def new_user() -> str:
    return f"fault-{uuid.uuid4().hex[:6]}"


def test_llm_down_slow_or_garbage_still_stores_every_turn(stack: Stack) -> None:
    user = new_user()
    facts = {"fail_tasks": "violin", "task_latency_ms": "tomatoes", "garbage_tasks": "Basque"}
    sentences = {"violin": "I play the violin.", "tomatoes": "I grow tomatoes.",
                 "Basque": "I speak Basque."}  # fmt: skip
    failed_before = metric(
        stack, "memory_sidecar_extractions_total", extractor="llm", outcome="failed"
    )
    for knob, word in facts.items():
        set_mock(stack, **{knob: 3000 if knob == "task_latency_ms" else True})
        try:
            written = metric(stack, "memory_sidecar_turns_total", outcome="written")
            status, _ = ask(stack, user, sentences[word])
            assert status == 200
            wait_for(lambda w=written: metric(
                stack, "memory_sidecar_turns_total", outcome="written") > w)  # fmt: skip
        finally:
            set_mock(stack, fail_tasks=False, task_latency_ms=0, garbage_tasks=False)
    failed = metric(stack, "memory_sidecar_extractions_total", extractor="llm", outcome="failed")
    assert failed >= failed_before + 3
    status, answer = ask(stack, user, "What do I play, grow and speak?")
    block = injected(answer)
    for word in facts.values():
        assert word in block


def test_frozen_sidecar_is_bypassed_after_message_timeout(stack: Stack) -> None:
    assert stack.sidecar.process is not None
    pid = stack.sidecar.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        statuses = [ask(stack, new_user(), "Hello there, where do I live?")[0] for _ in range(3)]
        elapsed = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    assert statuses == [200, 200, 200]  # fail-open: zero client errors
    assert elapsed < 3 * 6  # each waited at most about message_timeout (2 s) + slack
    wait_for(lambda: ask(stack, new_user(), "ping?")[0] == 200)


def test_store_process_killed_fails_open_then_recovers_without_losing_turns(
    stack: Stack,
) -> None:
    store_pids = [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _is_store_of(entry, stack)
    ]
    assert store_pids, "the milvus-lite server process of the sidecar was not found"
    user = new_user()
    for pid in store_pids:
        os.kill(pid, signal.SIGKILL)
    accepted = metric(stack, "memory_sidecar_turns_total", outcome="accepted")
    status, _ = ask(stack, user, "I keep bees on my roof.")
    assert status == 200  # fail-open: served without memory
    status, answer = ask(stack, user, "Where do I keep bees?", prefix="/closed/v1")
    assert status == 503  # fail-closed: a clear error
    assert answer["error"]["type"].startswith("memory_")
    assert metric(stack, "memory_sidecar_turns_total", outcome="accepted") >= accepted + 1
    # The accepted turn waits in the journal; a restart brings a store back.
    stack.restart_sidecar()
    wait_for(lambda: "bees" in injected(ask(stack, user, "Where do I keep bees?")[1]), 60)


def _is_store_of(entry: Path, stack: Stack) -> bool:
    try:
        cmdline = (entry / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return (
        bool(cmdline)
        and cmdline[0].endswith(b"milvus")
        and any(str(stack.workdir).encode() in part for part in cmdline)
    )


def envoy_ext_proc_stats(stack: Stack) -> dict[str, int]:
    """Envoy's own ext_proc counters (where Envoy-side fail-opens are counted)."""
    status, body = http_get(f"http://127.0.0.1:{stack.ports.envoy_admin}/stats?filter=ext_proc")
    assert status == 200
    stats: dict[str, int] = {}
    for line in body.decode().splitlines():
        name, _, value = line.partition(": ")
        if value.strip().isdigit():
            stats[name] = int(value)
    return stats


def test_a_fail_closed_route_holds_when_the_sidecar_is_frozen_or_gone(stack: Stack) -> None:
    """Envoy itself refuses a fail-closed route's requests when the sidecar cannot
    answer (the route's ext_proc override), while fail-open routes go on."""
    assert stack.sidecar.process is not None
    pid = stack.sidecar.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        frozen_open = ask(stack, new_user(), "Where do I live?")[0]
        frozen_closed = ask(stack, new_user(), "Where do I live?", prefix="/closed/v1")[0]
    finally:
        os.kill(pid, signal.SIGCONT)
    stack.sidecar.kill()
    try:
        gone_open = ask(stack, new_user(), "Where do I live?")[0]
        gone_closed = ask(stack, new_user(), "Where do I live?", prefix="/closed/v1")[0]
        stats = envoy_ext_proc_stats(stack)
    finally:
        stack.restart_sidecar()
    assert (frozen_open, gone_open) == (200, 200)
    assert frozen_closed >= 500
    assert gone_closed >= 500
    # Envoy counts the requests it let through without the sidecar.
    assert sum(v for k, v in stats.items() if k.endswith("failure_mode_allowed")) >= 2, stats
    # ... under the names deploy/prometheus/alerts.yaml reads.
    status, body = http_get(f"http://127.0.0.1:{stack.ports.envoy_admin}/stats/prometheus")
    assert status == 200
    for name in ENVOY_SERIES:
        assert f"\n{name}{{" in body.decode(), name
    wait_for(lambda: ask(stack, new_user(), "ping?", prefix="/closed/v1")[0] == 200)
