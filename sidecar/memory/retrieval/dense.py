"""``dense``: plain cosine search over memory embeddings (the baseline)."""

from __future__ import annotations

from sidecar.memory.filters import build_filter
from sidecar.memory.records import Hit, Scope
from sidecar.memory.retrieval.base import Query
from sidecar.memory.store import MemoryStore


class DenseRetriever:
    name = "dense"

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    async def retrieve(self, query: Query, *, scope: Scope, top_k: int) -> list[Hit]:
        return await self._store.search(query.vector, where=build_filter(scope=scope), limit=top_k)
