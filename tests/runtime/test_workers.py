"""server.workers: each worker's configuration, journals of removed workers, the
Envoy cluster over every worker. The processes themselves: tests/e2e/test_workers.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.config import SidecarConfig, config_from_mapping
from sidecar.envoy_config import render_yaml
from sidecar.errors import ConfigError
from sidecar.memory.records.turns import Turn
from sidecar.memory.write.rows.locks import host_locks_for
from sidecar.memory.write.turns.journal import TurnJournal
from sidecar.memory.write.turns.journal_file import adopt_journal
from sidecar.runtime.workers import (
    adopt_stray_journals,
    worker_config,
    worker_journals,
    worker_path,
)
from tests.memory.write.journal_support import turn


def config(**overrides: Any) -> SidecarConfig:
    data: dict[str, Any] = {
        "server": {"port": 50100, "workers": 3},
        "admin": {"port": 9500},
        "store": {"uri": "/var/lib/memory/memory.db"},
        "write_queue": {"journal_path": "/var/lib/memory/journal.sqlite3"},
        "profiles": {"strict": {"paths": ["/strict/v1/chat/completions"]}},
    }
    data.update(overrides)
    return config_from_mapping(data, env={})


def test_worker_paths_keep_worker_zero_and_number_the_others() -> None:
    assert worker_path("/d/journal.sqlite3", 0) == "/d/journal.sqlite3"
    assert worker_path("/d/journal.sqlite3", 2) == "/d/journal.w2.sqlite3"
    assert worker_path("feedback.jsonl", 1) == "feedback.w1.jsonl"
    assert worker_path("", 3) == ""  # a feature switched off stays off


def test_worker_config_moves_ports_and_files_and_shares_the_store() -> None:
    base = config()
    second = worker_config(base, 2, "unix:/tmp/x_memory.db.sock")
    assert (second.server.port, second.admin.port) == (50102, 9502)
    assert second.store.uri == "unix:/tmp/x_memory.db.sock"
    assert not second.store.is_local_file  # a running server: no file to create
    # ... but milvus-lite all the same: every process takes the file's store gate.
    assert second.store.gate_path == Path("/var/lib/memory/memory.db.gates")
    assert base.store.gate_path == second.store.gate_path
    assert second.write_queue.journal_path == "/var/lib/memory/journal.w2.sqlite3"
    for profile in (second.defaults, second.profile("strict")):
        assert profile is not None
        assert profile.deep_search.feedback_path.endswith("deep_search_feedback.w2.jsonl")
    # Everything else is the same configuration.
    assert second.embedding == base.embedding
    assert second.profile_names() == base.profile_names()
    first = worker_config(base, 0, None)
    assert first.store.uri == base.store.uri
    assert first.write_queue.journal_path == base.write_queue.journal_path


def test_admin_port_zero_stays_any_port() -> None:
    assert worker_config(config(admin={"port": 0}), 1, None).admin.port == 0


def test_writers_of_their_own_are_supervised_beside_their_workers(tmp_path: Path) -> None:
    one = config(server={"port": 0, "workers": 1}, write_queue={"own_process": True})
    assert one.supervised  # a supervisor, even for one worker
    assert one.model_processes == 2
    assert one.shares_store  # the writer writes the rows the worker reads
    assert one.writer_metrics_port(0) == 9500 + 1 + 1  # after the encoder's place
    assert one.encoder_metrics_port is None  # CPU: a model per process
    shared = config(
        server={"workers": 1}, write_queue={"own_process": True}, embedding={"shared": "on"}
    )
    assert shared.encoder_metrics_port == 9501  # the worker and its writer share it
    four = config(server={"port": 50100, "workers": 4}, write_queue={"own_process": True})
    assert [four.writer_metrics_port(i) for i in range(4)] == [9505, 9506, 9507, 9508]
    assert config().writer_metrics_port(0) is None
    assert not config(server={"workers": 1}).supervised

    second = worker_config(four, 2, None, "/run/sidecar-x")
    assert second.cache.relay_socket == "/run/sidecar-x/relay-2.sock"
    assert second.cache.relay_peers == [f"/run/sidecar-x/relay-{i}.sock" for i in (0, 1, 3)]
    assert worker_config(config(), 2, None).cache.relay_socket == ""  # unsupervised
    alone = worker_config(one, 0, None, "/run/sidecar-x")
    assert (alone.cache.relay_socket, alone.cache.relay_peers) == (
        "/run/sidecar-x/relay-0.sock",
        [],
    )

    locks_config = config(
        server={"workers": 1},
        write_queue={"own_process": True, "journal_path": str(tmp_path / "j.sqlite3")},
    )
    locks = host_locks_for(locks_config)
    assert locks is not None  # the worker and its writer write one user's rows
    locks.close()
    with pytest.raises(ConfigError, match="writers"):
        config(server={"workers": 2}, write_queue={"own_process": True}, admin={"port": 65532})


def test_workers_need_a_fixed_port_and_room_above_it() -> None:
    with pytest.raises(ConfigError, match=r"fixed server\.port"):
        config(server={"port": 0, "workers": 2})
    with pytest.raises(ConfigError, match="past port 65535"):
        config(server={"port": 65535, "workers": 2})
    with pytest.raises(ConfigError, match="past port 65535"):
        config(admin={"port": 65534})
    assert config(server={"port": 0}).server.workers == 1  # one worker: any port


def test_envoy_balances_over_every_worker() -> None:
    rendered = yaml.safe_load(
        render_yaml(config(envoy={"sidecar_port": 50100}), "http://127.0.0.1:8000")
    )
    cluster = next(
        c for c in rendered["static_resources"]["clusters"] if c["name"] == "memory_sidecar"
    )
    endpoints = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
    ports = [e["endpoint"]["address"]["socket_address"]["port_value"] for e in endpoints]
    assert ports == [50100, 50101, 50102]
    assert cluster["lb_policy"] == "LEAST_REQUEST"
    assert cluster["health_checks"]  # a dead worker is taken out of the rotation
    single = yaml.safe_load(render_yaml(config(server={"port": 50100}), "http://127.0.0.1:8000"))
    cluster = next(
        c for c in single["static_resources"]["clusters"] if c["name"] == "memory_sidecar"
    )
    assert len(cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]) == 1
    assert "lb_policy" not in cluster


async def write_turns(path: Path, turns: list[Turn], *, finish: int = 0) -> None:
    journal = TurnJournal(path, max_pending=100)
    await journal.open()
    try:
        for item in turns:
            await journal.append(item)
        for claimed in await journal.claim(finish):
            await journal.complete(claimed.id)
    finally:
        await journal.close()


async def pending_texts(path: Path) -> list[tuple[str, str]]:
    journal = TurnJournal(path, max_pending=100)
    await journal.open()
    try:
        out: list[tuple[str, str]] = []
        while claimed := await journal.claim(10):
            for item in claimed:
                out.append((item.turn.user_id, item.turn.user_text))
                await journal.complete(item.id)
        return out
    finally:
        await journal.close()


async def test_turns_of_removed_workers_move_into_the_remaining_ones(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    await write_turns(path, [turn("u0", "kept by worker 0")])
    await write_turns(
        Path(worker_path(str(path), 2)),
        [turn("u1", "first"), turn("u2", "still pending"), turn("u1", "second")],
        finish=1,  # u1's first turn was written before the restart
    )
    await write_turns(Path(worker_path(str(path), 3)), [turn("u3", "from worker 3")])
    assert sorted(worker_journals(str(path))) == [0, 2, 3]

    moved = adopt_stray_journals(str(path), workers=2)

    assert moved == 3
    assert sorted(worker_journals(str(path))) == [0, 1]  # 2 -> 0, 3 -> 1
    assert not list(tmp_path.glob("journal.w2*"))  # noqa: ASYNC240
    assert await pending_texts(path) == [
        ("u0", "kept by worker 0"),
        ("u2", "still pending"),
        ("u1", "second"),
    ]
    assert await pending_texts(Path(worker_path(str(path), 1))) == [("u3", "from worker 3")]
    assert adopt_stray_journals(str(path), workers=2) == 0  # nothing left to move


async def test_adopting_an_empty_file_moves_nothing(tmp_path: Path) -> None:
    stray = tmp_path / "journal.w1.sqlite3"
    stray.touch()
    assert adopt_journal(tmp_path / "journal.sqlite3", stray) == 0
