"""Fixtures of the write path's tests that several test modules share.

The turn journal's tests (``test_journal_*.py``) share a settable clock, the
journal's file path and an open journal on it; their helpers are in
``journal_support.py``. The retention tests (``test_retention_*.py``) share a store
per module and a per-test :class:`~tests.memory.write.retention_support.Harness`
over it (``test_hierarchy.py`` and ``test_write_queue.py`` define a ``harness`` of
their own, which takes precedence there).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sidecar.config import CacheConfig, StoreConfig
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.write.rows.locks import KeyedLocks
from sidecar.memory.write.turns.journal import TurnJournal
from sidecar.metrics import Metrics
from tests.memory.write.journal_support import Clock
from tests.memory.write.retention_support import DIM, Harness


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "journal.sqlite3"


@pytest.fixture
async def journal(path: Path, clock: Clock) -> AsyncIterator[TurnJournal]:
    opened = TurnJournal(path, max_pending=100, clock=clock)
    await opened.open()
    yield opened
    await opened.close()


@pytest.fixture(scope="module")
async def shared_store(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MemoryStore]:
    path = tmp_path_factory.mktemp("retention") / "r.db"
    store = await MemoryStore.open(StoreConfig(uri=str(path)), DIM, Metrics())
    yield store
    await store.close()


@pytest.fixture
async def harness(
    shared_store: MemoryStore, request: pytest.FixtureRequest
) -> AsyncIterator[Harness]:
    metrics = Metrics()
    cache = CorpusCache(shared_store, CacheConfig(), metrics)
    # A short prefix per test: ids stay within the schema's 64 bytes (the columnar
    # upsert of access rows checks VARCHAR lengths as a Milvus server does).
    prefix = hashlib.sha256(request.node.name.encode()).hexdigest()[:12] + ":"
    yield Harness(shared_store, cache, metrics, KeyedLocks(), prefix)
    await cache.close()
