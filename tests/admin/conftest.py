"""A running in-process sidecar (gRPC + admin listeners, milvus-lite) shared by the
admin tests of this package, and a log capture."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import aiohttp
import grpc
import pytest

from sidecar.config import config_from_mapping
from sidecar.logs import RequestIdFilter
from sidecar.memory.embedding.protocol import Embedder
from sidecar.runtime.components import Components
from sidecar.runtime.server import Sidecar

ADMIN = "admin-token-0123456789abcdef"
SCOPED = "alice-team-token-0123456789"


@pytest.fixture(scope="package")
async def sidecar(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
) -> AsyncIterator[Sidecar]:
    tmp = tmp_path_factory.mktemp("admin-api")
    config = config_from_mapping(
        {
            "server": {"port": 0},
            "admin": {
                "port": 0,
                "token": ADMIN,
                "tokens": [{"token": SCOPED, "users": ["alice-*"], "name": "alice-team"}],
            },
            "store": {"uri": str(tmp / "memory.db")},
            "write_queue": {"journal_path": str(tmp / "journal.sqlite3")},
            "hierarchy": {"schedule_s": 0},
        },
        env={},
    )
    components = await Components.build(config, embedder=embedder)
    server = Sidecar(components)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture(scope="package")
async def http(sidecar: Sidecar) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{sidecar.admin_port}") as session:
        yield session


@pytest.fixture(scope="package")
async def channel(sidecar: Sidecar) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sidecar.port}") as ch:
        yield ch


@pytest.fixture
def captured_logs() -> Iterator[list[logging.LogRecord]]:
    """Every record any logger emits during the test, as the JSON handler sees it."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.DEBUG)
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
