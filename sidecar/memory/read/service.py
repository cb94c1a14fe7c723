"""The plain search: what the admin API, ``sidecar eval`` and the benchmarks call.

:meth:`MemoryService.search` runs the configured retrieval strategy over a scope's
corpus, waiting for the corpus to load when it is not cached, with no caches of
questions or rankings in between. The request path is
:class:`~sidecar.memory.read.pipeline.RequestPipeline`, which scores corpora with
the same strategies through :meth:`MemoryService.rank`. Neither owns a transport;
``extproc`` depends on them, never the reverse.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from sidecar.config import RetrievalConfig
from sidecar.errors import ConfigError
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.focus import query_text
from sidecar.memory.read.retrieval.base import Query, Retriever, SearchSpace
from sidecar.memory.records.records import Hit, Scope
from sidecar.memory.store.protocol import Store
from sidecar.metrics import Metrics


class MemoryService:
    """The retrieval strategies by name over the store, its embedder and the corpus
    cache."""

    def __init__(
        self,
        store: Store,
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

    async def embed(self, texts: Sequence[str], config: RetrievalConfig) -> list[Query]:
        """``texts``, each focused to ``max_query_chars`` (a long one by its question:
        :func:`~sidecar.memory.language.focus.focus_query`), with their vectors, in one
        model call."""
        clipped = [query_text(text, config.max_query_chars) for text in texts]
        if not clipped:
            return []
        started = time.perf_counter()
        vectors = await self.embedder.embed(clipped, urgent=True)
        self._metrics.embed_seconds.observe(time.perf_counter() - started)
        return [Query(text, vector) for text, vector in zip(clipped, vectors, strict=True)]

    async def search(
        self, query: Query, scope: Scope, config: RetrievalConfig, *, top_k: int | None = None
    ) -> list[Hit]:
        """The configured strategy's top ``top_k`` (default ``config.top_k``) for an
        embedded query, over the scope's corpus (loaded first when not cached)."""
        started = time.perf_counter()
        retriever = self.retriever(config.strategy)
        corpus = await self.cache.corpus(scope)
        hits = await self.rank(retriever, query, scope, corpus, config, top_k or config.top_k)
        self.observe(retriever.name, started)
        return hits

    async def rank(
        self,
        retriever: Retriever,
        query: Query,
        scope: Scope,
        corpus: Corpus,
        config: RetrievalConfig,
        top_k: int,
    ) -> list[Hit]:
        """One strategy's top ``top_k`` over ``corpus`` (store-side strategies read the
        store instead)."""
        return await retriever.retrieve(
            query, SearchSpace(scope, corpus, self.store, config), top_k
        )

    def observe(self, strategy: str, started: float) -> None:
        """Count one retrieval of ``strategy`` that began at ``started``."""
        self._metrics.retrieval_seconds.labels(strategy=strategy).observe(
            time.perf_counter() - started
        )
