"""Strategies that search the store itself instead of the scope's corpus.

``dense-milvus`` (FLAT cosine with the scope filter) and ``bm25-milvus`` (Milvus'
full-text BM25 function) exist to be measured against the corpus strategies:
Milvus computes BM25 statistics over the whole collection — every user's text —
where ``bm25`` uses only what the scope can see.
"""

from __future__ import annotations

from sidecar.memory.read.retrieval.base import Query, SearchSpace
from sidecar.memory.records.records import Hit
from sidecar.memory.store.filters import build_filter

#: Strategies whose answers come from the store, not from the scope's corpus
#: snapshot (so nothing derived from the snapshot may stand for them).
STORE_SIDE_STRATEGIES = frozenset({"dense-milvus", "bm25-milvus"})


class MilvusDenseRetriever:
    name = "dense-milvus"

    async def retrieve(self, query: Query, space: SearchSpace, top_k: int) -> list[Hit]:
        hits = await space.store.search(
            query.vector, where=build_filter(scope=space.scope), limit=top_k
        )
        return [
            Hit(h.record, h.score, {"cosine": h.score})
            for h in hits
            if h.score >= space.config.threshold
        ]


class MilvusBM25Retriever:
    name = "bm25-milvus"

    async def retrieve(self, query: Query, space: SearchSpace, top_k: int) -> list[Hit]:
        if not query.tokens:
            return []
        hits = await space.store.search_text(
            query.text, where=build_filter(scope=space.scope), limit=top_k
        )
        # Milvus' BM25 is unbounded and collection-relative: no absolute gate here.
        return [Hit(h.record, h.score, {"bm25": h.score}) for h in hits]
