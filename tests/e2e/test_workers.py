"""server.workers through the real Envoy: two sidecar processes behind one
supervisor, one embedded store server. Traffic reaches both; a memory written by
one is served by the other; a worker killed with SIGKILL costs no client error
(fail-open) and comes back; SIGTERM stops everything, the store server included."""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.stack import Stack, http_get, running_stack

pytestmark = pytest.mark.e2e

WORKERS = 2
ADMIN_TOKEN = "workers-e2e-admin-token-0123456789"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    overrides: dict[str, Any] = {
        "server": {"workers": WORKERS},
        # No refresh runs during the tests (ttl_s 30 s by default): what one worker
        # writes reaches a corpus the other holds over the cache relay.
        "admin": {"token": ADMIN_TOKEN},
    }
    with running_stack(tmp_path_factory.mktemp("workers"), config_overrides=overrides) as running:
        yield running


def ask(stack: Stack, user: str, text: str) -> tuple[int, str]:
    return stack.chat(user, text)


def requests_per_worker(stack: Stack) -> list[float]:
    return stack.sidecar_metric_per_worker("memory_sidecar_streams_total")


def wait_for(check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
            found.append(int(entry))
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def worker_pids(stack: Stack) -> list[int]:
    assert stack.sidecar.process is not None
    return [
        pid
        for pid in children(stack.sidecar.process.pid)
        if "spawn_main" in cmdline(pid) and "resource_tracker" not in cmdline(pid)
    ]


def test_both_workers_take_traffic_and_share_memories(stack: Stack) -> None:
    wait_for(lambda: stack.sidecar_health() == ["healthy"] * WORKERS)
    before = requests_per_worker(stack)
    after = before
    for i in range(200):  # least request over idle workers: random, both within a few
        status, _ = ask(stack, f"spread-{i}", "What do you know about me?")
        assert status == 200
        if i % 10 == 9:
            after = requests_per_worker(stack)
            if all(b > a for a, b in zip(before, after, strict=True)):
                break
    assert all(b > a for a, b in zip(before, after, strict=True)), (before, after)

    # A memory written by whichever worker took the turn reaches the next question,
    # whichever worker takes that, at once: over the cache relay, not a refresh.
    user = f"erin-{uuid.uuid4().hex[:6]}"
    relayed = relay_frames(stack, "apply", "received")
    for echo in served_by_each_worker(stack, user, "What do you know about me?", 1):
        assert "Lisbon" not in echo  # both workers hold the user's corpus now
    ask(stack, user, "I live in Lisbon and I play the cello.")
    wait_for(lambda: stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "written"}) > 0)
    wait_for(lambda: relay_frames(stack, "apply", "received") > relayed, timeout=10)
    assert all(
        "Lisbon" in echo for echo in served_by_each_worker(stack, user, "Where do I live?", 2)
    )


def relay_frames(stack: Stack, kind: str, outcome: str) -> float:
    return stack.sidecar_metric(
        "memory_sidecar_cache_relay_frames_total", {"kind": kind, "outcome": outcome}
    )


def served_by_each_worker(stack: Stack, user: str, question: str, times: int) -> list[str]:
    """Ask until every worker has answered ``times`` more requests; the answers."""
    before = requests_per_worker(stack)
    echoes: list[str] = []
    for _ in range(40 * times):
        echoes.append(ask(stack, user, question)[1])
        after = requests_per_worker(stack)
        if all(b - a >= times for a, b in zip(before, after, strict=True)):
            return echoes
    raise AssertionError(f"a worker got no traffic: {before} -> {after}")


def test_forget_through_one_worker_reaches_every_worker(stack: Stack) -> None:
    """Both workers hold the user's memories in their caches; a forget through one
    worker's admin API stops both from serving them at once (its tombstones cross
    the cache relay), not at a full reload (cache.full_reload_s, ten minutes)."""
    user, secret = f"fay-{uuid.uuid4().hex[:6]}", f"zq{uuid.uuid4().hex[:10]}"
    written = stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "written"})
    ask(stack, user, f"I live in Lisbon and I play the cello. My locker code is {secret}.")
    wait_for(
        lambda: stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "written"}) > written
    )
    time.sleep(0.5)  # the relay's frames
    assert all(
        "Lisbon" in echo for echo in served_by_each_worker(stack, user, "Where do I live?", 2)
    )

    request = urllib.request.Request(
        f"{stack.sidecar_admin_urls[0]}/v1/admin/users/{user}",
        method="DELETE",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        assert json.loads(response.read())["deleted"]["rows"] >= 2
    time.sleep(0.5)  # the relay's frames (no refresh runs meanwhile)
    echoes = served_by_each_worker(stack, user, "Where do I live?", 3)
    assert not [echo for echo in echoes if "Lisbon" in echo or "cello" in echo]
    # The embedded server's file was rewritten: no freed page keeps their words.
    stores = list(stack.workdir.rglob("*.db"))
    assert stores
    assert not [path.name for path in stores if secret.encode() in path.read_bytes()]


def answers(url: str) -> bool:
    try:
        return http_get(url)[0] == 200
    except (OSError, http.client.HTTPException):  # not listening (yet)
        return False


def test_a_killed_worker_costs_no_client_error_and_comes_back(stack: Stack) -> None:
    pids = worker_pids(stack)
    assert len(pids) == WORKERS
    victim = pids[-1]
    os.kill(victim, signal.SIGKILL)
    statuses = [ask(stack, f"during-{i}", "Hello there")[0] for i in range(30)]
    assert statuses == [200] * 30  # fail-open: answered, with or without memory

    def restarted() -> bool:
        now = worker_pids(stack)
        ready = all(answers(f"{url}/ready") for url in stack.sidecar_admin_urls)
        return len(now) == WORKERS and victim not in now and ready

    wait_for(restarted, timeout=90)
    assert "exited" in stack.sidecar.tail(200)
    for i in range(10):
        assert ask(stack, f"after-{i}", "Hello again")[0] == 200


def test_sigterm_stops_workers_and_the_store_server(tmp_path: Path) -> None:
    with running_stack(tmp_path, config_overrides={"server": {"workers": WORKERS}}) as stack:
        assert stack.sidecar.process is not None
        supervisor = stack.sidecar.process.pid
        family = children(supervisor)
        assert any("milvus" in cmdline(pid) for pid in family)
        assert len(worker_pids(stack)) == WORKERS
        assert ask(stack, "zed", "I like green tea.")[0] == 200
        code = stack.sidecar.stop(timeout=60)
        assert code == 0
        # multiprocessing's resource tracker leaves when its pipe closes, a moment
        # after the supervisor: allow it that moment.
        wait_for(lambda: not any(alive(pid) for pid in family), timeout=10)


@pytest.mark.parametrize(
    "overrides",
    [
        {"server": {"workers": WORKERS}},
        {"write_queue": {"own_process": True}},  # one worker and its writer
    ],
    ids=["workers", "writer"],
)
def test_workers_and_store_server_do_not_outlive_a_killed_supervisor(
    tmp_path: Path, overrides: dict[str, Any]
) -> None:
    with running_stack(tmp_path, config_overrides=overrides) as stack:
        assert stack.sidecar.process is not None
        wait_for(lambda: len(worker_pids(stack)) == 2, timeout=90)  # workers, or one + writer
        family = children(stack.sidecar.process.pid)
        assert len(family) >= 3  # those two and the store server at least
        stack.sidecar.kill()

        def gone() -> bool:
            return not any(alive(pid) for pid in family)

        wait_for(gone, timeout=20)
        # Envoy fails open meanwhile: the route still answers.
        assert ask(stack, "after-the-fall", "Still there?")[0] == 200
