"""Helpers of the retention and access-tracking tests: a memory row and the
per-test :class:`Harness` over a store shared by a test module (its own users,
ids, cache and metrics). The fixtures that build them are in ``conftest.py``
beside this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sidecar.config import RetentionConfig
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.records.records import MemoryRecord, Scope, Status
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.write.rows.locks import KeyedLocks
from sidecar.memory.write.upkeep.access import AccessTracker
from sidecar.memory.write.upkeep.retention import Retention
from sidecar.metrics import Metrics
from tests.support.writes import gateway

DIM = 4
DAY = 86_400_000
NOW = 1_800_000_000_000


def rec(rid: str, user: str = "alice", **extra: Any) -> MemoryRecord:
    values: dict[str, Any] = {
        "importance": 0.5,
        "created_at": NOW - 10 * DAY,
        "updated_at": NOW - 10 * DAY,
    }
    values.update(extra)
    return MemoryRecord(
        id=rid,
        user_id=user,
        content=f"memory {rid}",
        embedding=(1.0, 0.0, 0.0, 0.0),
        **values,
    )


@dataclass
class Harness:
    """One test's view of the module's store: its own users and ids (``prefix``), its
    own cache and metrics."""

    store: MemoryStore
    cache: CorpusCache
    metrics: Metrics
    locks: KeyedLocks
    prefix: str

    def u(self, user: str) -> str:
        return self.prefix + user

    def rec(self, rid: str, user: str = "alice", **extra: Any) -> MemoryRecord:
        return rec(self.prefix + rid, self.u(user), **extra)

    def bare(self, rid: str) -> str:
        return rid.removeprefix(self.prefix)

    def retention(self, **config: Any) -> Retention:
        return Retention(
            self.store,
            gateway(self.store, self.cache, locks=self.locks),
            RetentionConfig(**config),
            self.metrics,
            clock=lambda: NOW,
        )

    def tracker(self, **config: Any) -> AccessTracker:
        return AccessTracker(
            self.store,
            self.cache,
            RetentionConfig(**config),
            self.metrics,
            clock=lambda: NOW,
        )

    async def rows(self, owner: str, status: Status | None = Status.ACTIVE) -> list[MemoryRecord]:
        return await self.store.query(
            build_filter(owner=self.u(owner), status=status), limit=1000, with_vectors=True
        )

    async def ids(self, owner: str, status: Status | None = Status.ACTIVE) -> set[str]:
        return {self.bare(r.id) for r in await self.rows(owner, status)}

    async def corpus_ids(self, owner: str) -> set[str]:
        corpus = await self.cache.corpus(Scope(self.u(owner)))
        return {self.bare(r.id) for r in corpus.records}
