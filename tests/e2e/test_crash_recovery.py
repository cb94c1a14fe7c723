"""kill -9 with a backlog: every accepted turn's fact is stored exactly once.

The real sidecar process (``python -m sidecar serve``) runs with the mock LLM as
its extraction model, slowed down (``task_latency_ms``) so that turns pile up in
the write journal. The test drives the real gRPC ext_proc stream — request
headers, request body, response headers, response body, as Envoy sends them —
for N turns, each stating a distinct fact for one of U users, and checks that the
journal holds all N once the last phase replied. Then it SIGKILLs the sidecar
(mid-extraction: some turns in progress, most pending), speeds the mock up,
starts the sidecar again on the same store and journal, waits until the journal
is empty, stops it, and reads the store: per user, the set of stored contents
equals the facts that user stated, with no extra rows.

Semantic deduplication is reduced to exact matches in this config (every
``*_threshold`` of the extraction profile at 1.0) so that a distinct fact can
never be merged with another user fact: what is measured is the queue's
exactly-once, not the dedup judge.

A second test kills the sidecar while streams are in flight: every turn whose
last phase was acknowledged is stored exactly once, the others at most once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from e2e.stack import PYTHON, ManagedProcess, free_port, http_get, wait_until
from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from sidecar.config import ExtractionConfig, StoreConfig
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics
from tests.extproc import messages as msg

pytestmark = pytest.mark.e2e

#: Extraction per turn while the backlog builds (the mock's task latency).
SLOW_TASK_MS = 200
WORKERS = 4
FEED_CONCURRENCY = 32


@dataclass
class Rig:
    """Mock LLM + sidecar processes sharing one work directory."""

    workdir: Path
    grpc_port: int = field(default_factory=free_port)
    admin_port: int = field(default_factory=free_port)
    mock_port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self.store_path = self.workdir / "memory.db"
        self.journal_path = self.workdir / "journal.sqlite3"
        self.config_path = self.workdir / "sidecar.yaml"
        self.mock = ManagedProcess(
            "mock-llm",
            [
                PYTHON,
                "-m",
                "e2e.mock_llm",
                "--port",
                str(self.mock_port),
                "--task-latency-ms",
                str(SLOW_TASK_MS),
            ],
            self.workdir / "mock.log",
        )
        self.sidecar = ManagedProcess(
            "sidecar",
            [PYTHON, "-m", "sidecar", "serve", "--config", str(self.config_path)],
            self.workdir / "sidecar.log",
            env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        )

    def write_config(self) -> None:
        exact_only = {
            name: 1.0 for name in ExtractionConfig.model_fields if name.endswith("_threshold")
        }
        config: dict[str, Any] = {
            "server": {"host": "127.0.0.1", "port": self.grpc_port},
            "admin": {"host": "127.0.0.1", "port": self.admin_port},
            "store": {"uri": str(self.store_path)},
            "llm": {"base_url": f"http://127.0.0.1:{self.mock_port}/v1", "model": "mock-llm"},
            "write_queue": {
                "journal_path": str(self.journal_path),
                "workers": WORKERS,
                "max_pending": 5_000,
            },
            "hierarchy": {"enabled": False},
            "logging": {"level": "INFO"},
            "defaults": {"retrieval": {"enabled": False}, "extraction": exact_only},
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def start_mock(self) -> None:
        self.mock.start()

        def ready() -> bool:
            self.mock.check_alive()
            return http_get(f"http://127.0.0.1:{self.mock_port}/health")[0] == 200

        wait_until(ready, 60, "mock LLM")

    def set_task_latency(self, ms: float) -> None:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.mock_port}/_mock/config",
            data=json.dumps({"task_latency_ms": ms}).encode(),
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    def start_sidecar(self) -> float:
        """Start it; seconds until ready."""
        started = time.monotonic()
        self.sidecar.start()

        def ready() -> bool:
            self.sidecar.check_alive()
            return http_get(f"http://127.0.0.1:{self.admin_port}/ready")[0] == 200

        wait_until(ready, 120, "sidecar")
        return time.monotonic() - started

    def kill_sidecar(self) -> None:
        assert self.sidecar.process is not None
        self.sidecar.process.kill()  # SIGKILL
        assert self.sidecar.process.wait(10) == -9
        wait_released(self.store_path, 30)

    def journal_states(self) -> dict[str, int]:
        with closing(sqlite3.connect(f"file:{self.journal_path}?mode=ro", uri=True)) as conn:
            return dict(conn.execute("SELECT state, COUNT(*) FROM turns GROUP BY state"))

    def stop(self) -> None:
        self.sidecar.stop(timeout=60)
        self.mock.stop()


def wait_released(db_path: Path, timeout: float) -> None:
    """Wait for milvus-lite's server process on ``db_path`` to exit: it outlives a
    killed parent by a moment, and holds the file until then."""
    needle = str(db_path).encode()

    def gone() -> bool:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    if needle in handle.read():
                        return False
            except OSError:
                continue
        return True

    wait_until(gone, timeout, f"release of {db_path.name}")


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    made.write_config()
    made.start_mock()
    try:
        yield made
    except BaseException:
        for proc in (made.sidecar, made.mock):
            print(f"--- {proc.name} log ---\n{proc.tail(60)}")
        raise
    finally:
        made.stop()


def fact(number: int) -> str:
    """What extraction makes of ``My locker number is <number>.``"""
    return f"User's locker number is {number}."


async def feed(
    port: int,
    turns: list[tuple[str, int]],
    acknowledged: list[tuple[str, int]],
    on_ack: Callable[[], None] = lambda: None,
) -> None:
    """Each turn through all four ext_proc phases, as Envoy would send them. A turn
    whose last phase got its reply is appended to ``acknowledged`` (then ``on_ack``
    runs); a stream the sidecar's death breaks is not (and is not an error)."""
    semaphore = asyncio.Semaphore(FEED_CONCURRENCY)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalProcessorStub(channel)

        async def one(user: str, number: int) -> None:
            phases = [
                msg.request_headers(user=user, extra={"x-request-id": f"{user}-{number}"}),
                msg.request_body(msg.chat_body(f"My locker number is {number}.")),
                msg.response_headers(),
                msg.response_body(msg.completion_json("Noted, I will remember that.")),
            ]
            async with semaphore:
                call = stub.Process()
                replies: list[pb.ProcessingResponse] = []
                try:
                    for request in phases:
                        await call.write(request)
                        replies.append(await call.read())
                    await call.done_writing()
                except (grpc.RpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                    return  # the sidecar died under this stream
            assert [r.WhichOneof("response") for r in replies] == [
                "request_headers",
                "request_body",
                "response_headers",
                "response_body",
            ]
            acknowledged.append((user, number))
            on_ack()

        await asyncio.gather(*(one(user, number) for user, number in turns))


async def stored_contents(rig: Rig, dim: int, users: set[str]) -> dict[str, list[str]]:
    """Every memory row per user (any status), sorted; no rows of anyone else."""
    store = await MemoryStore.open(StoreConfig(uri=str(rig.store_path)), dim, Metrics())
    try:
        total = await store.count(build_filter(status=None))
        found = {
            user: sorted(
                r.content
                for r in await store.query(build_filter(owner=user, status=None), limit=5_000)
            )
            for user in users
        }
    finally:
        await store.close()
    assert total == sum(len(v) for v in found.values()), "rows outside the test users"
    return found


def open_turns(states: dict[str, int]) -> int:
    return states.get("pending", 0) + states.get("in_progress", 0)


async def recover(
    rig: Rig, embedder: Embedder, users: set[str]
) -> tuple[dict[str, list[str]], str]:
    """Restart on the same store and journal with extraction at full speed, wait
    until the journal is empty, stop gracefully; every stored row per user."""
    after_kill = rig.journal_states()
    rig.set_task_latency(0)
    restart_s = rig.start_sidecar()
    started = time.monotonic()

    def journal_empty() -> bool:
        rig.sidecar.check_alive()
        return open_turns(rig.journal_states()) == 0

    wait_until(journal_empty, 300, "the journal to empty")
    recover_s = time.monotonic() - started
    final = rig.journal_states()
    assert rig.sidecar.stop(timeout=60) == 0
    wait_released(rig.store_path, 30)
    found = await stored_contents(rig, embedder.dim, users)
    report = (
        f"journal after kill={after_kill} restart={restart_s:.1f}s "
        f"recovery={recover_s:.1f}s ({open_turns(after_kill) / recover_s:.0f} turns/s) "
        f"final={final}"
    )
    assert set(final) == {"done"}, report  # nothing dead, nothing left
    return found, report


async def test_kill_9_with_1000_queued_turns_loses_and_duplicates_nothing(
    rig: Rig, embedder: Embedder
) -> None:
    turns, users = 1000, 50
    plan = [(f"crash-user-{i % users:02d}", 1000 + i) for i in range(turns)]
    start_s = rig.start_sidecar()
    acknowledged: list[tuple[str, int]] = []
    started = time.monotonic()
    await feed(rig.grpc_port, plan, acknowledged)
    feed_s = time.monotonic() - started
    assert len(acknowledged) == turns
    # Let some turns finish: the kill then finds done, in-progress and pending ones.
    wait_until(lambda: rig.journal_states().get("done", 0) >= turns // 20, 60, "first writes")
    at_kill = rig.journal_states()
    assert sum(at_kill.values()) == turns, at_kill  # every acknowledged turn is journaled
    assert at_kill.get("pending", 0) > turns // 2, at_kill  # a real backlog
    rig.kill_sidecar()

    expected: defaultdict[str, list[str]] = defaultdict(list)
    for user, number in plan:
        expected[user].append(fact(number))
    found, report = await recover(rig, embedder, set(expected))
    report = (
        f"turns={turns} users={users} start={start_s:.1f}s feed={feed_s:.1f}s "
        f"({turns / feed_s:.0f} turns/s) at kill={at_kill} {report}"
    )
    print(report)
    for user, facts in expected.items():
        assert found[user] == sorted(facts), f"{user}: {report}"


async def test_kill_9_mid_feed_keeps_every_acknowledged_turn_once(
    rig: Rig, embedder: Embedder
) -> None:
    """Killed while streams are in flight: every turn whose last phase was
    acknowledged is stored exactly once; the others at most once."""
    turns, users = 300, 20
    plan = [(f"feed-user-{i % users:02d}", 5000 + i) for i in range(turns)]
    rig.start_sidecar()
    acknowledged: list[tuple[str, int]] = []
    process = rig.sidecar.process
    assert process is not None

    def kill_midway() -> None:
        if len(acknowledged) == turns // 2:
            process.kill()  # SIGKILL, with up to FEED_CONCURRENCY streams in flight

    await feed(rig.grpc_port, plan, acknowledged, kill_midway)
    rig.kill_sidecar()
    journaled = sum(rig.journal_states().values())
    assert turns // 2 <= len(acknowledged) <= journaled < turns

    found, report = await recover(rig, embedder, {user for user, _ in plan})
    print(f"turns={turns} acknowledged={len(acknowledged)} journaled={journaled} {report}")
    everything = {fact(number) for _, number in plan}
    for user, contents in found.items():
        assert len(contents) == len(set(contents)), f"{user}: duplicates"
        assert set(contents) <= everything
    for user, number in acknowledged:
        assert fact(number) in found[user], f"{user}: lost an acknowledged turn"
    assert sum(len(c) for c in found.values()) == journaled  # journaled = stored, once
