"""Two sidecar replicas behind one Envoy cluster, sharing one real Milvus server
(2.3.5, the ``milvus`` wheel), as on two hosts: separate processes, corpus caches and
journals, no cache relay and no host locks between them.

* A fact stored through one replica is injected through the other within the
  documented bound (the other's ``cache.ttl_s`` refresh, plus the server's Bounded
  staleness for a first load).
* Concurrent turns of one user spread over both replicas lose and duplicate nothing:
  each distinct fact is stored exactly once (ids follow the owner and the text, and
  each writer reads the owner's rows with Strong consistency before judging).
* One replica killed: the other keeps serving (fail-open answers meanwhile), and the
  dead one's journal is replayed when it comes back: a turn it had accepted and not
  written is stored.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import yaml

from e2e.milvus_server import MilvusServer
from e2e.stack import PYTHON, ManagedProcess, Stack, http_get, wait_until
from sidecar.config import StoreConfig
from sidecar.memory.store.filters import build_filter

pytestmark = pytest.mark.e2e

REPLICAS = 2
#: The replicas' cache refresh: what one writes reaches the other's cached corpus
#: within it.
TTL_S = 2.0


class Replicas:
    """The stack's mock LLM and Envoy, and one sidecar process per replica."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.processes: list[ManagedProcess] = []
        for i in range(REPLICAS):
            config = copy.deepcopy(stack.config)
            config["server"] = {**config["server"], "workers": 1, "port": stack.ports.sidecar + i}
            config["admin"] = {**config["admin"], "port": stack.ports.sidecar_admin + i}
            config["write_queue"] = {
                **config.get("write_queue", {}),
                "journal_path": str(stack.workdir / f"journal-{i}.sqlite3"),
            }
            path = stack.workdir / f"replica-{i}.yaml"
            path.write_text(yaml.safe_dump(config, sort_keys=False))
            self.processes.append(
                ManagedProcess(
                    f"replica-{i}",
                    [PYTHON, "-m", "sidecar", "serve", "--config", str(path)],
                    stack.workdir / f"replica-{i}.log",
                    env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
                )
            )

    def admin_url(self, i: int) -> str:
        return self.stack.sidecar_admin_urls[i]

    def start(self, i: int, timeout: float = 120.0) -> None:
        process = self.processes[i]
        process.start()

        def ready() -> bool:
            process.check_alive()
            return http_get(f"{self.admin_url(i)}/ready")[0] == 200

        wait_until(ready, timeout, process.name)

    def metric(self, i: int, name: str, labels: dict[str, str] | None = None) -> float:
        return self.stack._metric(self.admin_url(i), name, labels)

    def written(self) -> float:
        return sum(
            self.metric(i, "memory_sidecar_turns_total", {"outcome": "written"})
            for i in range(REPLICAS)
            if self.processes[i].running
        )

    def served(self) -> list[float]:
        return [
            self.metric(i, "memory_sidecar_streams_total") if self.processes[i].running else 0.0
            for i in range(REPLICAS)
        ]


@pytest.fixture(scope="module")
def replicas(
    tmp_path_factory: pytest.TempPathFactory, milvus_server: MilvusServer
) -> Iterator[Replicas]:
    workdir = tmp_path_factory.mktemp("replicas")
    overrides: dict[str, Any] = {
        # Renders Envoy's sidecar cluster with one endpoint per replica.
        "server": {"workers": REPLICAS},
        "store": {"uri": milvus_server.uri, "collection": f"replicas_{uuid.uuid4().hex[:8]}"},
        "cache": {"ttl_s": TTL_S},
    }
    stack = Stack(workdir, config_overrides=overrides, with_sidecar=False)
    running = Replicas(stack)
    try:
        stack.start()
        for i in range(REPLICAS):  # one at a time: the first exports the ONNX model
            running.start(i)
        wait_for(lambda: stack.sidecar_health() == ["healthy"] * REPLICAS, what="Envoy sees both")
        # Until Envoy has sent each replica a request (its least-request choice over
        # idle hosts is random, and a host's first health checks may still be due).
        wait_for(
            lambda: ask(stack, "warm-up", "Hello") is not None and min(running.served()) > 0,
            what="both replicas served",
        )
        yield running
    finally:
        for process in running.processes:
            process.stop(timeout=60)
        stack.stop()


def ask(stack: Stack, user: str, text: str) -> str:
    status, answer = stack.chat(user, text)
    assert status == 200
    return answer


def mock_config(stack: Stack, **knobs: float) -> None:
    request = urllib.request.Request(
        f"{stack.mock_url}/_mock/config",
        data=json.dumps(knobs).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def wait_for(check: Any, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not met within {timeout} s"
        time.sleep(0.1)


def answers_from_each(replicas: Replicas, user: str, question: str) -> list[str]:
    """Ask until each replica has answered at least once more; every answer."""
    before = replicas.served()
    echoes: list[str] = []
    for _ in range(60):
        echoes.append(ask(replicas.stack, user, question))
        after = replicas.served()
        if all(b > a for a, b in zip(before, after, strict=True)):
            return echoes
    raise AssertionError(f"a replica got no traffic: {before} -> {after}")


def injected_everywhere(replicas: Replicas, user: str, question: str, needle: str) -> None:
    """Every replica's answer carries ``needle`` within the bound: the other
    replica's cache refresh (``TTL_S``) plus a few seconds of the server's Bounded
    staleness and of loading a user not cached yet."""
    started = time.monotonic()
    bound = TTL_S + 5.0
    while True:
        echoes = answers_from_each(replicas, user, question)
        if all(needle in echo for echo in echoes):  # a round: each replica answered
            return
        assert time.monotonic() - started < bound, echoes
        time.sleep(0.2)


def test_a_fact_stored_through_one_replica_is_injected_through_the_other(
    replicas: Replicas,
) -> None:
    user = f"ines-{uuid.uuid4().hex[:6]}"
    for echo in answers_from_each(replicas, user, "What do you know about me?"):
        assert "Lisbon" not in echo  # both replicas hold the user's (empty) corpus
    written = replicas.written()
    ask(replicas.stack, user, "I live in Lisbon and I play the cello.")
    wait_for(lambda: replicas.written() > written, what="turn written")
    # Within the refresh bound, every replica injects it.
    injected_everywhere(replicas, user, "Where do I live?", "Lisbon")


def test_concurrent_turns_of_one_user_on_both_replicas_store_each_fact_once(
    replicas: Replicas, milvus_server: MilvusServer
) -> None:
    user = f"jon-{uuid.uuid4().hex[:6]}"
    facts = {
        "I have a dog named Rex.": "User has a dog named Rex.",
        "I play the cello.": "User plays the cello.",
        "I speak fluent Japanese.": "User speaks fluent Japanese.",
        "I collect vintage stamps.": "User collects vintage stamps.",
        "I run marathons every spring.": "User runs marathons every spring.",
        "I studied chemistry at university.": "User studied chemistry at university.",
    }
    sentences = sorted(facts)
    turns = [f"{sentences[i % 6]} {sentences[(i * 5 + 1) % 6]}" for i in range(16)]
    before = replicas.served()
    written = replicas.written()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda text: ask(replicas.stack, user, text), turns))
    after = replicas.served()
    assert all(b > a for a, b in zip(before, after, strict=True)), (before, after)
    wait_for(lambda: replicas.written() >= written + len(turns), what="turns written")

    from pymilvus import MilvusClient

    collection = replicas.stack.config["store"]["collection"]
    client = MilvusClient(uri=milvus_server.uri)
    try:
        rows = client.query(
            collection,
            filter=build_filter(owner=user, status=None),
            output_fields=["content", "status"],
            consistency_level="Strong",
        )
    finally:
        client.close()
    contents = Counter((row["content"], row["status"]) for row in rows)
    assert {content for content, _ in contents} == set(facts.values())
    assert max(contents.values()) == 1, contents
    assert {status for _, status in contents} == {"active"}


def test_a_killed_replica_costs_no_client_error_and_replays_its_journal(
    replicas: Replicas,
) -> None:
    """Replica 1 is killed with SIGKILL while a turn it accepted waits for the
    (slowed) extraction; Envoy's other endpoint keeps answering; replica 1 restarted
    writes the turn from its journal."""
    victim = replicas.processes[1]
    user = f"kim-{uuid.uuid4().hex[:6]}"
    mock_config(replicas.stack, task_latency_ms=4000)
    try:
        accepted = replicas.metric(1, "memory_sidecar_turns_total", {"outcome": "accepted"})
        for n in range(40):  # until replica 1 takes a turn
            ask(replicas.stack, user, f"My locker number is {4100 + n}.")
            taken = replicas.metric(1, "memory_sidecar_turns_total", {"outcome": "accepted"})
            if taken > accepted:
                break
        else:
            raise AssertionError("replica 1 took no turn")
        victim.kill()
        answers = [ask(replicas.stack, f"other-{i}", "Hello there") for i in range(20)]
        assert len(answers) == 20  # every one answered (200), by replica 0 or fail-open
    finally:
        mock_config(replicas.stack, task_latency_ms=0)
    replicas.start(1)
    store = StoreConfig(uri=replicas.stack.config["store"]["uri"])
    assert not store.is_local_file
    wait_for(
        lambda: replicas.metric(1, "memory_sidecar_turns_total", {"outcome": "written"}) >= 1,
        what="the journal's turn written after the restart",
    )
    # (A replica that starts cold serves a user's first request while it loads them.)
    injected_everywhere(replicas, user, "What is my locker number?", "locker number is 41")
