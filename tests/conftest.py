"""Shared fixtures.

* The embedding model is built once per test session. It uses the configured default
  backend; its ONNX export goes to a session temporary cache directory, which the
  embedder tests reuse (one export per session).
* The deterministic mock LLM (``e2e.mock_llm``) on loopback: ``mock_llm`` is started
  for one test, ``module_mock_llm`` for a module's fixtures (an in-process sidecar
  that needs its address).
* ``milvus_server``: one real Milvus server for the session (the ``milvus`` wheel,
  ``e2e/milvus_server.py``), started by the first test that asks; tests
  use collections of their own on it. Skipped, saying why, only where the wheel is
  missing or its server cannot start here.
* ``channel``: a gRPC channel to the in-process ``sidecar`` fixture of the module or
  package that asks for it (``tests.support.boot`` builds and runs one).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from e2e.milvus_server import MilvusServer, ServerUnavailable, start_server
from e2e.mock_llm import MockLLM, start_mock
from sidecar.config import EmbeddingConfig
from sidecar.memory.embedding.batching import BatchingEmbedder
from sidecar.memory.embedding.factory import build_local_embedder
from sidecar.runtime.server import Sidecar

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def embedding_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def embedding_config(embedding_cache_dir: Path) -> EmbeddingConfig:
    return EmbeddingConfig(cache_dir=str(embedding_cache_dir))


@pytest.fixture(scope="session")
async def embedder(embedding_config: EmbeddingConfig) -> AsyncIterator[BatchingEmbedder]:
    loop = asyncio.get_running_loop()
    built = await loop.run_in_executor(None, build_local_embedder, embedding_config)
    yield built
    await built.close()


@pytest.fixture
async def mock_llm() -> AsyncIterator[MockLLM]:
    """The mock LLM, started for this test: its own config, record and counters."""
    async with await start_mock() as server:
        yield server


@pytest.fixture(scope="module")
async def module_mock_llm() -> AsyncIterator[MockLLM]:
    """The mock LLM, started once for the test module."""
    async with await start_mock() as server:
        yield server


@pytest.fixture(scope="module")
async def channel(sidecar: Sidecar) -> AsyncIterator[grpc.aio.Channel]:
    """A gRPC channel to ``sidecar``: the fixture of that name where the test is."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sidecar.port}") as ch:
        yield ch


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusServer]:
    try:
        server = start_server(tmp_path_factory.mktemp("milvus-server"))
    except ServerUnavailable as exc:
        pytest.skip(f"no Milvus server here: {exc}")
    yield server
    server.stop()
