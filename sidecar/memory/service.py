"""The memory service: what the request path (and the admin API, eval harness and
benchmarks) call. It owns no transport; ``extproc`` depends on it, never the reverse.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from sidecar.config import RetrievalConfig
from sidecar.errors import ConfigError
from sidecar.memory.corpus import Corpus, CorpusCache
from sidecar.memory.embedder import Embedder
from sidecar.memory.records import Hit, Scope
from sidecar.memory.retrieval.base import Query, Retriever, SearchContext
from sidecar.memory.store import MemoryStore
from sidecar.metrics import Metrics

#: What answers a scope whose corpus is not loaded yet (store-side, no waiting).
COLD_FALLBACK = "dense-milvus"


class MemoryService:
    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        cache: CorpusCache,
        retrievers: Mapping[str, Retriever],
        metrics: Metrics,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.cache = cache
        self._retrievers = dict(retrievers)
        self._metrics = metrics

    @property
    def strategies(self) -> list[str]:
        return sorted(self._retrievers)

    def retriever(self, name: str) -> Retriever:
        try:
            return self._retrievers[name]
        except KeyError:
            known = ", ".join(sorted(self._retrievers))
            raise ConfigError(f"unknown retrieval strategy {name!r} (known: {known})") from None

    async def embed_query(self, text: str, config: RetrievalConfig) -> Query:
        started = time.perf_counter()
        clipped = text[: config.max_query_chars]
        vector = (await self.embedder.embed([clipped]))[0]
        self._metrics.embed_seconds.observe(time.perf_counter() - started)
        return Query(clipped, vector)

    async def search(
        self,
        query: Query,
        scope: Scope,
        config: RetrievalConfig,
        *,
        top_k: int | None = None,
        wait: bool = True,
    ) -> list[Hit]:
        """Run the configured strategy for an already embedded query.

        ``wait=False`` (the request path) never waits for a scope's corpus to load:
        a scope seen for the first time is answered by a cosine search in the store
        while its corpus loads in the background.
        """
        started = time.perf_counter()
        retriever = self.retriever(config.strategy)
        if wait:
            corpus = await self.cache.corpus(scope)
        else:
            cached = self.cache.corpus_nowait(scope)
            if cached is None:
                retriever = self.retriever(COLD_FALLBACK)
                cached = Corpus.build((), self.store.dim)  # store-side: reads no corpus
                self._metrics.cold_fallbacks.inc()
            corpus = cached
        context = SearchContext(scope, corpus, self.store, config)
        hits = await retriever.retrieve(query, context, top_k or config.top_k)
        self._metrics.retrieval_seconds.labels(strategy=retriever.name).observe(
            time.perf_counter() - started
        )
        return hits

    def category_names(self, scope: Scope, hits: list[Hit]) -> dict[str, str]:
        """Names (L0 abstracts) of the categories ``hits`` are filed under, from the
        scope's cached corpus (empty when it is not cached)."""
        wanted = {h.record.category_id for h in hits if h.record.category_id}
        corpus = self.cache.corpus_nowait(scope) if wanted else None
        if corpus is None:
            return {}
        return {c.id: c.abstract for c in corpus.categories if c.id in wanted and c.abstract}

    async def retrieve(self, text: str, scope: Scope, config: RetrievalConfig) -> list[Hit]:
        """The memories to inject for ``text``: the strategy's top-k with evidence."""
        query = await self.embed_query(text, config)
        return await self.search(query, scope, config, wait=False)
