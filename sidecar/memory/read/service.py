"""The memory service: what the request path (and the admin API, eval harness and
benchmarks) call. It owns no transport; ``extproc`` depends on it, never the reverse.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sidecar.config import Profile, RetrievalConfig
from sidecar.errors import ConfigError
from sidecar.llm import LLMClient
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.model.records import Hit, Scope
from sidecar.memory.read.corpus import Corpus
from sidecar.memory.read.corpus_cache import CorpusCache
from sidecar.memory.read.deep_ranking import PrimaryConfidence
from sidecar.memory.read.deep_search import DeepReport, DeepResult, DeepSearcher
from sidecar.memory.read.query_cache import QueryVectorCache, RecentRankings, Vector
from sidecar.memory.read.retrieval.base import Query, Retriever, SearchContext
from sidecar.memory.read.retrieval.store_side import STORE_SIDE_STRATEGIES
from sidecar.memory.read.rewrite import QueryRewriter, RewriteResult, fuse_rewrite_hits
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics

#: What answers a scope whose corpus is not loaded yet (store-side, no waiting).
COLD_FALLBACK = "dense-milvus"


@dataclass(frozen=True, slots=True)
class RequestRetrieval:
    """The request path's retrieval: the hits to inject and how they were found."""

    hits: list[Hit]
    rewrite: RewriteResult | None = None
    deep: DeepReport | None = None


class MemoryService:
    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        cache: CorpusCache,
        retrievers: Mapping[str, Retriever],
        metrics: Metrics,
        *,
        llm: LLMClient | None = None,
        query_vectors: QueryVectorCache | None = None,
        debug_content: bool = False,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.cache = cache
        #: The request path's query vectors by user and text (None: every query is
        #: embedded). Other callers (eval, admin search, benchmarks) never use it.
        self.query_vectors = query_vectors
        self._retrievers = dict(retrievers)
        self._metrics = metrics
        #: Follow-up query rewriting (its cache lives here) and deep search (its
        #: rate limiter, feedback files and shadow tasks).
        self.rewriter = QueryRewriter(llm, metrics)
        self.deep = DeepSearcher(llm, metrics, debug_content=debug_content)

    def forget_user(self, user_id: str) -> int:
        """Drop what this process caches of ``user_id``'s queries (their vectors and
        rewrites); how many entries. Called when the corpus cache invalidates the
        user — a forget here, or one a peer relays."""
        dropped = self.rewriter.forget(user_id)
        if self.query_vectors is not None:
            dropped += self.query_vectors.forget(user_id)
        return dropped

    @property
    def strategies(self) -> list[str]:
        return sorted(self._retrievers)

    def retriever(self, name: str) -> Retriever:
        try:
            return self._retrievers[name]
        except KeyError:
            known = ", ".join(sorted(self._retrievers))
            raise ConfigError(f"unknown retrieval strategy {name!r} (known: {known})") from None

    async def embed_query(
        self, text: str, config: RetrievalConfig, *, user: str | None = None
    ) -> Query:
        """``text`` (clipped to ``max_query_chars``) and its vector. With ``user`` (the
        request path) a vector cached for that user and text is reused."""
        return (await self.embed_queries([text], config, user=user))[0]

    async def search(
        self,
        query: Query,
        scope: Scope,
        config: RetrievalConfig,
        *,
        top_k: int | None = None,
        wait: bool = True,
        reuse: bool = False,
    ) -> list[Hit]:
        """Run the configured strategy for an already embedded query.

        ``wait=False`` (the request path) never waits for a scope's corpus to load:
        a scope seen for the first time is answered by a cosine search in the store
        while its corpus loads in the background. ``reuse`` (the request path): a
        ranking of the same text made from the same corpus snapshot is reused
        (``retrieval.ranking_cache_ttl_s``).
        """
        started = time.perf_counter()
        retriever = self.retriever(config.strategy)
        k = top_k or config.top_k
        rankings: RecentRankings | None = None
        if wait:
            corpus = await self.cache.corpus(scope)
        else:
            cached = self.cache.corpus_nowait(scope)
            if cached is None:
                retriever = self.retriever(COLD_FALLBACK)
                cached = Corpus.build((), self.store.dim)  # store-side: reads no corpus
                self._metrics.cold_fallbacks.inc()
            corpus = cached
        if reuse and config.ranking_cache_ttl_s > 0 and retriever.name not in STORE_SIDE_STRATEGIES:
            rankings = RecentRankings.of(corpus)
            hits = rankings.get(retriever.name, k, query.text, config)
            self._metrics.ranking_cache.labels(outcome="miss" if hits is None else "hit").inc()
            if hits is not None:
                self._observe_retrieval(retriever.name, started)
                return hits
        context = SearchContext(scope, corpus, self.store, config)
        hits = await retriever.retrieve(query, context, k)
        if rankings is not None:
            rankings.put(retriever.name, k, query.text, config, hits)
        self._observe_retrieval(retriever.name, started)
        return hits

    def _observe_retrieval(self, strategy: str, started: float) -> None:
        self._metrics.retrieval_seconds.labels(strategy=strategy).observe(
            time.perf_counter() - started
        )

    def category_names(self, scope: Scope, hits: list[Hit]) -> dict[str, str]:
        """Names (L0 abstracts) of the categories ``hits`` are filed under, from the
        scope's cached corpus (empty when it is not cached)."""
        wanted = {h.record.category_id for h in hits if h.record.category_id}
        corpus = self.cache.corpus_nowait(scope) if wanted else None
        if corpus is None:
            return {}
        found = (corpus.category(cid) for cid in wanted)
        return {c.id: c.abstract for c in found if c is not None and c.abstract}

    async def retrieve(self, text: str, scope: Scope, config: RetrievalConfig) -> list[Hit]:
        """The memories to inject for ``text``: the strategy's top-k with evidence."""
        query = await self.embed_query(text, config)
        return await self.search(query, scope, config, wait=False)

    async def embed_queries(
        self, texts: Sequence[str], config: RetrievalConfig, *, user: str | None = None
    ) -> list[Query]:
        """Several queries embedded in one model call (see :meth:`embed_query`)."""
        clipped = [text[: config.max_query_chars] for text in texts]
        cache = self.query_vectors if user is not None else None
        vectors: dict[int, Vector] = {}
        if cache is not None and user is not None:
            for i, text in enumerate(clipped):
                vector = cache.get(user, text)
                if vector is not None:
                    vectors[i] = vector
            outcomes = self._metrics.query_vector_cache
            if vectors:
                outcomes.labels(outcome="hit").inc(len(vectors))
            if len(vectors) < len(clipped):
                outcomes.labels(outcome="miss").inc(len(clipped) - len(vectors))
        missing = [i for i in range(len(clipped)) if i not in vectors]
        if missing:
            started = time.perf_counter()
            fresh = await self.embedder.embed([clipped[i] for i in missing], urgent=True)
            self._metrics.embed_seconds.observe(time.perf_counter() - started)
            for i, vector in zip(missing, fresh, strict=True):
                vectors[i] = vector
                if cache is not None and user is not None:
                    cache.put(user, clipped[i], vector)
        return [Query(text, vectors[i]) for i, text in enumerate(clipped)]

    async def retrieve_texts(
        self,
        text: str,
        scope: Scope,
        config: RetrievalConfig,
        *,
        also: str | None = None,
        top_k: int | None = None,
        wait: bool = False,
        cached: bool = False,
    ) -> tuple[Query, list[Hit]]:
        """Search ``text`` (and ``also``, fused with it; see ``rewrite.search``).
        ``cached`` (the request path): the query vectors and rankings may come from
        the caches."""
        user = scope.user_id if cached else None
        if also is None:
            query = await self.embed_query(text, config, user=user)
            hits = await self.search(query, scope, config, top_k=top_k, wait=wait, reuse=cached)
            return query, hits
        query, other = await self.embed_queries([text, also], config, user=user)
        hits = await self.search(query, scope, config, top_k=top_k, wait=wait, reuse=cached)
        more = await self.search(other, scope, config, top_k=top_k, wait=wait, reuse=cached)
        return query, fuse_rewrite_hits(hits, more, top_k or config.top_k)

    async def retrieve_for_request(
        self,
        text: str,
        history: Sequence[tuple[str, str]],
        scope: Scope,
        profile: Profile,
        *,
        session_key: str | None = None,
        profile_name: str = "",
    ) -> RequestRetrieval:
        """The request path: rewrite (own budget, never fails), retrieval within
        ``retrieval.timeout_ms`` (raises ``TimeoutError``, ``StoreError``,
        ``EmbeddingError``), then deep search per ``deep_search.mode`` (own budget)."""
        rewrite: RewriteResult | None = None
        search_text, also = text, None
        if profile.rewrite.enabled:
            rewrite = await self.rewriter.rewrite(text, history, scope.user_id, profile.rewrite)
            if rewrite.changed:
                search_text = rewrite.query
                also = text if profile.rewrite.search == "both" else None
        retrieval = profile.retrieval
        async with asyncio.timeout(retrieval.timeout_ms / 1000):  # no task of its own
            query, hits = await self.retrieve_texts(
                search_text, scope, retrieval, also=also, cached=True
            )
        deep: DeepReport | None = None
        if profile.deep_search.mode != "off":
            hits, deep = await self._deep_on_request(
                query, hits, scope, profile, session_key or scope.user_id, profile_name
            )
        return RequestRetrieval(hits, rewrite, deep)

    async def _deep_on_request(
        self,
        query: Query,
        hits: list[Hit],
        scope: Scope,
        profile: Profile,
        key: str,
        profile_name: str,
    ) -> tuple[list[Hit], DeepReport]:
        config, retrieval = profile.deep_search, profile.retrieval
        mode = config.mode
        decision, confidence = self.deep.decide(hits, config, retrieval.top_k, key)
        corpus = self.cache.corpus_nowait(scope) if decision == "escalate" else None
        if decision == "escalate" and corpus is None:
            decision = "cold"
        if decision != "escalate" or corpus is None:
            self.deep.count_decision(mode, decision)
            return hits, DeepReport(decision, confidence.value)
        self.deep.count_decision(mode, "escalate")
        work = self._deep_run(query, hits, corpus, scope, profile, profile_name, confidence)
        if mode == "shadow":
            self.deep.background(work)  # changes nothing; costs the request nothing
            return hits, DeepReport("shadow", confidence.value)
        result = await work
        report = DeepReport(
            "escalate", confidence.value, result.outcome, result.method, len(result.new_ids)
        )
        return result.hits[: retrieval.top_k], report

    async def _deep_run(
        self,
        query: Query,
        hits: list[Hit],
        corpus: Corpus,
        scope: Scope,
        profile: Profile,
        profile_name: str,
        confidence: PrimaryConfidence,
    ) -> DeepResult:
        config, retrieval = profile.deep_search, profile.retrieval
        deeper = await self.search(
            query, scope, retrieval, top_k=max(config.primary_k, retrieval.top_k), wait=False
        )
        seen = {h.record.id for h in hits}
        primary = hits + [h for h in deeper if h.record.id not in seen]
        return await self.deep.run(
            query,
            primary,
            corpus,
            scope,
            config,
            retrieval.top_k,
            mode=config.mode,
            profile=profile_name,
            confidence=confidence,
        )

    async def close(self) -> None:
        """Stop shadow deep searches and close the feedback files."""
        await self.deep.close()
