"""A Milvus server going away mid-traffic and coming back, through the real Envoy:
the sidecar (a process, storing on the ``milvus`` wheel's 2.3.5 server through a TCP
relay, :mod:`e2e.tcp_proxy`) sees every connection reset and new ones refused, then
the server again with its data, as a restart with persistent storage looks to it.

While it is gone: fail-open routes answer (a user whose memories are cached still gets
them), a fail-closed route answers 503 for a user it cannot serve, and finished turns
are accepted into the journal. Once it is back, without restarting the sidecar: every
accepted turn is written exactly once and its facts are injected."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.milvus_server import MilvusServer
from e2e.stack import PYTHON, ManagedProcess, Stack, free_port, running_stack, wait_until
from tests.e2e.test_faults import ROUTES, ask, injected, metric, wait_for

pytestmark = pytest.mark.e2e

#: How long the server stays away (its connections reset at the start).
OUTAGE_S = 8.0


class Relay:
    """The TCP relay in front of the server: kill it and the server is gone."""

    def __init__(self, server: MilvusServer, workdir: Path) -> None:
        self.port = free_port()
        self.process = ManagedProcess(
            "milvus-relay",
            [
                PYTHON,
                "-m",
                "e2e.tcp_proxy",
                "--listen",
                str(self.port),
                "--target",
                f"127.0.0.1:{server.port}",
            ],
            workdir / "relay.log",
        )

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        self.process.start()
        wait_until(lambda: "PROXY_READY" in self.process.tail(), 15, "the relay")

    def down(self) -> None:
        self.process.kill()


@pytest.fixture(scope="module")
def relay(milvus_server: MilvusServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    relay = Relay(milvus_server, tmp_path_factory.mktemp("relay"))
    relay.up()
    yield relay
    relay.down()


@pytest.fixture(scope="module")
def stack(relay: Relay, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir: Path = tmp_path_factory.mktemp("outage")
    overrides: dict[str, Any] = {
        "store": {"uri": relay.uri, "collection": f"outage_{uuid.uuid4().hex[:8]}"},
        "profiles": {
            "closed": {"paths": ["/closed/v1/chat/completions"], "fail_open": False},
        },
        "write_queue": {"retry_base_s": 0.2, "retry_max_s": 1.0},
        "envoy": {"routes": ROUTES},
    }
    with running_stack(workdir, config_overrides=overrides) as running:
        yield running


def new_user() -> str:
    return f"outage-{uuid.uuid4().hex[:6]}"


def written(stack: Stack) -> float:
    return metric(stack, "memory_sidecar_turns_total", outcome="written")


def test_a_server_outage_fails_open_and_loses_no_turn(stack: Stack, relay: Relay) -> None:
    known = new_user()
    assert ask(stack, known, "I keep bees on my roof.")[0] == 200
    wait_for(lambda: "bees" in injected(ask(stack, known, "Where do I keep bees?")[1]), 30)

    relay.down()
    started = time.monotonic()
    accepted = metric(stack, "memory_sidecar_turns_total", outcome="accepted")
    written_before = written(stack)
    during = new_user()
    statuses = [ask(stack, during, "My cat is called Miso.")[0]]
    statuses.append(ask(stack, during, "I grow tomatoes in the garden.")[0])
    # A user whose memories are cached is still served from the cache.
    status, answer = ask(stack, known, "Where do I keep bees?")
    statuses.append(status)
    still_injected = "bees" in injected(answer)
    # A user the sidecar cannot serve: the fail-closed route says so.
    closed_status, _ = ask(stack, new_user(), "What is my cat called?", prefix="/closed/v1")
    assert statuses == [200, 200, 200]  # fail-open: zero client errors
    assert still_injected
    assert closed_status in (200, 503)  # 503 unless its (empty) scope was answered
    taken = metric(stack, "memory_sidecar_turns_total", outcome="accepted") - accepted
    assert taken >= 3  # every finished turn went into the journal
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - started)))
    # The fact turns wait in the journal (a question stores nothing and is written).
    assert stack.metric_total("memory_sidecar_store_errors_total", {}) > 0
    assert "Miso" not in injected(ask(stack, during, "What is my cat called?")[1])
    taken += 1

    relay.up()  # the server is back; the sidecar is not restarted
    wait_for(lambda: written(stack) >= written_before + taken, 90)
    wait_for(lambda: "Miso" in injected(ask(stack, during, "What is my cat called?")[1]), 30)
    wait_for(lambda: "tomato" in injected(ask(stack, during, "What do I grow?")[1]), 30)
    assert metric(stack, "memory_sidecar_turns_total", outcome="dead_letter") == 0
    # Each fact once: what the user said is stored exactly once.
    block = injected(ask(stack, during, "Tell me about my cat and my garden.")[1])
    assert block.count("Miso") == 1
    # The log stayed JSON lines, without the store client's tracebacks or any user id.
    lines = [line for line in stack.sidecar.log_path.read_text().splitlines() if line]
    not_json = [line for line in lines if not line.startswith(("{", "SIDECAR_READY"))]
    assert not_json == []
    assert all(during not in line and known not in line for line in lines)
