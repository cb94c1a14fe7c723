"""A running in-process sidecar (gRPC + admin listeners, milvus-lite) shared by the
admin tests of this package (``channel``, the root conftest's, reaches its gRPC
listener), and a log capture."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from sidecar.logs import RequestIdFilter
from sidecar.memory.embedding.protocol import Embedder
from sidecar.runtime.server import Sidecar
from tests.support.boot import running_sidecar, sidecar_config

ADMIN = "admin-token-0123456789abcdef"
SCOPED = "alice-team-token-0123456789"
#: Scoped like SCOPED, and allowed to share with group ``team-a``.
SHARER = "alice-sharer-token-0123456789"


@pytest.fixture(scope="package")
async def sidecar(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
) -> AsyncIterator[Sidecar]:
    config = sidecar_config(
        tmp_path_factory.mktemp("admin-api"),
        admin={
            "enabled": True,
            "port": 0,
            "token": ADMIN,
            "tokens": [
                {"token": SCOPED, "users": ["alice-*"], "name": "alice-team"},
                {
                    "token": SHARER,
                    "users": ["alice-*"],
                    "name": "alice-sharer",
                    "share_groups": ["team-a"],
                },
            ],
        },
        hierarchy={"schedule_s": 0},
        defaults={"injection": {"explain_last": 5}},
    )
    async with running_sidecar(config, embedder) as server:
        yield server


@pytest.fixture(scope="package")
async def http(sidecar: Sidecar) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{sidecar.admin_port}") as session:
        yield session


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


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """The CLI configures the root logger; put pytest's set-up back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
