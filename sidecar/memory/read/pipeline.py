"""The request path: the memories to inject for one chat request, in named steps.

    rewrite -> embed -> search -> deep search -> assemble

* **rewrite** (own budget, never fails): an ambiguous follow-up is rewritten from
  the conversation (:class:`~sidecar.memory.read.rewrite.rewriter.QueryRewriter`); with
  ``rewrite.search: both`` the original is searched too and the two rankings fused.
* **embed**: a vector this user's identical question got recently is reused
  (:class:`~sidecar.memory.read.query_cache.QueryVectorCache`), the rest embedded in
  one model call.
* **search**: the profile's strategy over the scope's cached corpus. A scope seen
  for the first time is never waited for: a cosine search in the store answers
  while its corpus loads in the background. A ranking of the same text from the
  same corpus snapshot is reused (``retrieval.ranking_cache_ttl_s``).
  Embedding and search together take at most ``retrieval.timeout_ms``.
* **deep search** per ``deep_search.mode`` (own budget): a second, slower look when
  the primary results look weak (:mod:`sidecar.memory.read.deep.search`).
* **assemble**: the block injected into the prompt, within ``injection.max_tokens``,
  labelled with category names; the injected memories' accesses are recorded and,
  where the profile keeps explanations (``injection.explain_last``), why each
  memory is there (:mod:`sidecar.memory.read.injections`).

:meth:`RequestPipeline.run` raises ``TimeoutError``, ``StoreError`` or
``EmbeddingError`` when the search cannot be done; the caller decides between
failing open and failing closed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from sidecar.config import Profile, RetrievalConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.language.ambiguity import History
from sidecar.memory.language.directives import overrides_assistant
from sidecar.memory.language.excerpts import adds_detail, said_for, window
from sidecar.memory.language.focus import focus_query, query_text
from sidecar.memory.language.said import ASKED
from sidecar.memory.language.text import valid_unicode
from sidecar.memory.read.block import (
    CHARS_PER_TOKEN,
    MemoryBlock,
    assemble_block,
    distinct_hits,
)
from sidecar.memory.read.deep.ranking import PrimaryConfidence
from sidecar.memory.read.deep.search import DeepReport, DeepResult, DeepSearcher
from sidecar.memory.read.injections import InjectionLog, explain
from sidecar.memory.read.query_cache import QueryVectorCache, RecentRankings, Vector
from sidecar.memory.read.retrieval.base import Query, Retriever
from sidecar.memory.read.retrieval.store_side import STORE_SIDE_STRATEGIES
from sidecar.memory.read.rewrite.rewriter import QueryRewriter, RewriteResult, fuse_rewrite_hits
from sidecar.memory.read.service import MemoryService
from sidecar.memory.read.support import with_support
from sidecar.memory.records.records import Hit, Scope, Visibility, now_ms
from sidecar.metrics import Metrics

#: How much further than ``top_k`` the request path searches, so that memories that
#: duplicate a better one give their places to the next (:func:`distinct_hits`).
SEARCH_DEPTH = 2
#: What answers a scope whose corpus is not loaded yet (store-side, no waiting).
COLD_FALLBACK = "dense-milvus"


class AccessRecorder(Protocol):
    """Counts the injected memories' accesses (in memory; written in the background)."""

    def record(self, hits: Sequence[Hit]) -> None: ...


@dataclass(frozen=True, slots=True)
class MemoryRequest:
    """One chat request, as the request path needs it."""

    #: The latest user message.
    text: str
    #: The conversation before it, oldest first (only read to rewrite a follow-up).
    history: History
    scope: Scope
    profile: Profile
    profile_name: str = ""
    #: Whose deep-search budget an escalation spends (``x-session-id``, else user).
    session_key: str = ""
    #: The request's id (``x-request-id``): what an explanation is found by.
    request_id: str = ""
    #: When it is asked (epoch ms; 0: now). A replayed conversation asks at its time.
    at_ms: int = 0


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """What the request path found: the block to inject and how it was found."""

    block: MemoryBlock
    #: The ranked memories before assembly.
    hits: list[Hit]
    rewrite: RewriteResult | None = None
    deep: DeepReport | None = None
    #: Why the block was injected is kept (``injection.explain_last``).
    explained: bool = False


def _excerpts(request: MemoryRequest) -> Callable[[Hit, int], str]:
    """What was said, to show under a memory: the part of its excerpt nearest the
    question, where it carries what the fact alone loses — only for the asker's own
    private memories (what another user said is never shown), never an order."""
    owner, cap = request.scope.user_id, request.profile.injection.excerpt_chars

    def said(hit: Hit, room: int) -> str:
        record = hit.record
        if not record.excerpt or record.user_id != owner or record.visibility != Visibility.USER:
            return ""
        limit = min(cap, room)
        fragment = (
            window(record.excerpt, request.text, limit)  # the answer's part asked about
            if record.source == ASKED
            else said_for(record.excerpt, record.content, request.text, limit)
        )
        if not adds_detail(record.content, fragment) or overrides_assistant(fragment):
            return ""
        return fragment

    return said


class QueryCaches:
    """What the request path keeps of a user's questions: their query vectors, their
    rewrites and, where kept, their injections explained. Forgetting a user (here,
    or a peer's forget over the cache relay) drops all of it, so it is handed to the
    corpus cache as its user observer."""

    def __init__(
        self,
        rewriter: QueryRewriter,
        vectors: QueryVectorCache | None,
        injections: InjectionLog | None = None,
    ) -> None:
        self.rewriter = rewriter
        self.vectors = vectors
        self.injections = injections

    def forget_user(self, user_id: str) -> int:
        """Drop what is kept of ``user_id``'s questions; how many entries."""
        dropped = self.rewriter.forget(user_id)
        if self.vectors is not None:
            dropped += self.vectors.forget(user_id)
        if self.injections is not None:
            dropped += self.injections.forget_user(user_id)
        return dropped


class RequestPipeline:
    """See the module docstring."""

    def __init__(
        self,
        memory: MemoryService,
        caches: QueryCaches,
        deep: DeepSearcher,
        metrics: Metrics,
        *,
        access: AccessRecorder | None = None,
    ) -> None:
        self.memory = memory
        self.caches = caches
        self.rewriter = caches.rewriter
        self.deep = deep
        self._metrics = metrics
        self._access = access

    async def run(self, request: MemoryRequest) -> RequestOutcome:
        """Every step for ``request`` (see the module docstring). A message longer
        than ``retrieval.max_query_chars`` is searched by its question
        (:func:`~sidecar.memory.language.focus.focus_query`), rewriting included; lone
        surrogates in it are replaced (counted), never an embedding failure."""
        focused = focus_query(request.text, request.profile.retrieval.max_query_chars)
        repaired = valid_unicode(focused)
        if repaired is not focused:  # lone surrogates: bad input, not a failure
            self._metrics.repaired_text.labels(where="query").inc()
        if repaired != request.text:
            request = replace(request, text=repaired)
        rewrite = await self.rewrite(request)
        texts = [request.text]
        if rewrite is not None and rewrite.changed:
            texts = [rewrite.query]
            if request.profile.rewrite.search == "both":
                texts.append(request.text)
        retrieval = request.profile.retrieval
        async with asyncio.timeout(retrieval.timeout_ms / 1000):  # no task of its own
            queries = await self.embed(texts, request)
            hits = await self.search(queries, request)
        deep: DeepReport | None = None
        if request.profile.deep_search.mode != "off":
            hits, deep = await self.deep_search(queries[0], hits, request)
        block = self.assemble(hits, request)
        explained = self._explain(request, block, rewrite, deep)
        return RequestOutcome(block, hits, rewrite, deep, explained)

    def _explain(
        self,
        request: MemoryRequest,
        block: MemoryBlock,
        rewrite: RewriteResult | None,
        deep: DeepReport | None,
    ) -> bool:
        """Keep why this block was injected, where the profile asks for it; whether
        it was kept."""
        keep = request.profile.injection.explain_last
        log = self.caches.injections
        if not keep or log is None or not block.count or not request.request_id:
            return False
        injection = explain(
            request_id=request.request_id,
            at_ms=now_ms(),
            profile=request.profile_name,
            query=request.text,
            rewritten=rewrite.query if rewrite is not None and rewrite.changed else None,
            hits=block.hits,
            groups=request.scope.group_ids,
            deep=deep.header_value() if deep is not None else None,
        )
        log.record(request.scope.user_id, injection, keep)
        return True

    async def rewrite(self, request: MemoryRequest) -> RewriteResult | None:
        """The follow-up rewritten from the conversation (None: rewriting is off)."""
        config = request.profile.rewrite
        if not config.enabled:
            return None
        return await self.rewriter.rewrite(
            request.text, request.history, request.scope.user_id, config
        )

    async def embed(self, texts: Sequence[str], request: MemoryRequest) -> list[Query]:
        """``texts`` embedded, reusing the vectors this user's same questions got."""
        config = request.profile.retrieval
        clipped = [query_text(text, config.max_query_chars) for text in texts]
        cache, user = self.caches.vectors, request.scope.user_id
        vectors: dict[int, Vector] = {}
        if cache is not None:
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
        fresh = await self.memory.embed([clipped[i] for i in missing], config)
        for i, query in zip(missing, fresh, strict=True):
            vectors[i] = query.vector
            if cache is not None:
                cache.put(user, clipped[i], query.vector)
        return [Query(text, vectors[i], request.at_ms) for i, text in enumerate(clipped)]

    async def search(self, queries: Sequence[Query], request: MemoryRequest) -> list[Hit]:
        """The top-k for the first query (fused with the second's, when given),
        reusing recent rankings of the same corpus snapshot."""
        config = request.profile.retrieval
        hits = await self._ranked(queries[0], request.scope, config)
        if len(queries) == 1:
            return hits
        more = await self._ranked(queries[1], request.scope, config)
        return fuse_rewrite_hits(hits, more, config.top_k * SEARCH_DEPTH)

    async def deep_search(
        self, query: Query, hits: list[Hit], request: MemoryRequest
    ) -> tuple[list[Hit], DeepReport]:
        """A second look per ``deep_search.mode`` when the primary results look weak;
        ``shadow`` runs it in the background and changes nothing."""
        config, retrieval = request.profile.deep_search, request.profile.retrieval
        mode = config.mode
        key = request.session_key or request.scope.user_id
        decision, confidence = self.deep.decide(hits, config, retrieval.top_k, key)
        corpus = self.memory.cache.corpus_nowait(request.scope) if decision == "escalate" else None
        if decision == "escalate" and corpus is None:
            decision = "cold"
        if decision != "escalate" or corpus is None:
            self.deep.count_decision(mode, decision)
            return hits, DeepReport(decision, confidence.value)
        self.deep.count_decision(mode, "escalate")
        work = self._deep_run(query, hits, corpus, request, confidence)
        if mode == "shadow":
            self.deep.background(work)  # changes nothing; costs the request nothing
            return hits, DeepReport("shadow", confidence.value)
        result = await work
        report = DeepReport(
            "escalate", confidence.value, result.outcome, result.method, len(result.new_ids)
        )
        return result.hits[: retrieval.top_k], report

    def assemble(self, hits: list[Hit], request: MemoryRequest) -> MemoryBlock:
        """The block to inject: the best ``top_k`` memories that state different facts
        (the search looks further than ``top_k`` so that a duplicate's place goes to
        the next memory), within ``injection.max_tokens``; the accesses of the
        memories in it are recorded. A memory that tries to instruct the assistant
        (:func:`~sidecar.memory.language.directives.overrides_assistant`) is withheld,
        whoever stored it and when, and its place goes to the next; so is one that
        ranked only through a link, without a named bridge
        (:mod:`~sidecar.memory.read.support`)."""
        withheld = 0

        def safe(ranked: Iterable[Hit]) -> Iterator[Hit]:
            nonlocal withheld
            for hit in ranked:
                if overrides_assistant(hit.record.content):
                    withheld += 1
                else:
                    yield hit

        top_k = request.profile.retrieval.top_k
        unsupported: list[Hit] = []
        hits = distinct_hits(safe(with_support(hits, unsupported, top_k)), top_k)
        if withheld:
            self._metrics.instructions_blocked.labels(stage="read").inc(withheld)
        if unsupported:
            last = hits[-1].score if len(hits) >= top_k else float("-inf")
            crowded = sum(1 for hit in unsupported if hit.score >= last)
            if crowded:
                self._metrics.unsupported_withheld.inc(crowded)
        injection = request.profile.injection
        names = self._category_names(request.scope, hits) if injection.category_labels else None
        block = assemble_block(
            hits,
            max_chars=injection.max_tokens * CHARS_PER_TOKEN,
            categories=names,
            said=_excerpts(request) if injection.excerpt_chars else None,
        )
        if block.count and self._access is not None:
            self._access.record(block.hits)
        return block

    def forget_user(self, user_id: str) -> int:
        """Drop what this process keeps of ``user_id``'s questions."""
        return self.caches.forget_user(user_id)

    async def close(self) -> None:
        """Stop shadow deep searches and close the feedback files."""
        await self.deep.close()

    # -- the search's parts --------------------------------------------------------------

    async def _ranked(self, query: Query, scope: Scope, config: RetrievalConfig) -> list[Hit]:
        """``_rank_uncached``, through the ranking cache of the corpus snapshot."""
        started = time.perf_counter()
        retriever, corpus = self._target(scope, config)
        k = config.top_k * SEARCH_DEPTH
        if config.ranking_cache_ttl_s <= 0 or retriever.name in STORE_SIDE_STRATEGIES:
            hits = await self.memory.rank(retriever, query, scope, corpus, config, k)
            self.memory.observe(retriever.name, started)
            return hits
        rankings = RecentRankings.of(corpus)
        cached = rankings.get(retriever.name, k, query.text, config)
        self._metrics.ranking_cache.labels(outcome="miss" if cached is None else "hit").inc()
        if cached is not None:
            self.memory.observe(retriever.name, started)
            return cached
        hits = await self.memory.rank(retriever, query, scope, corpus, config, k)
        rankings.put(retriever.name, k, query.text, config, hits)
        self.memory.observe(retriever.name, started)
        return hits

    async def _rank_uncached(
        self, query: Query, scope: Scope, config: RetrievalConfig, top_k: int
    ) -> list[Hit]:
        """The strategy's top ``top_k`` over the cached corpus (or the cold fallback),
        never from the ranking cache."""
        started = time.perf_counter()
        retriever, corpus = self._target(scope, config)
        hits = await self.memory.rank(retriever, query, scope, corpus, config, top_k)
        self.memory.observe(retriever.name, started)
        return hits

    def _target(self, scope: Scope, config: RetrievalConfig) -> tuple[Retriever, Corpus]:
        """The strategy and the corpus it scores: the scope's cached corpus, or, while
        it loads, the store-side fallback (which reads no corpus)."""
        corpus = self.memory.cache.corpus_nowait(scope)
        if corpus is None:
            self._metrics.cold_fallbacks.inc()
            fallback = self.memory.retriever(COLD_FALLBACK)
            return fallback, Corpus.build((), self.memory.store.dim)
        return self.memory.retriever(config.strategy), corpus

    def _category_names(self, scope: Scope, hits: list[Hit]) -> dict[str, str]:
        """Names (L0 abstracts) of the categories ``hits`` are filed under, from the
        scope's cached corpus (empty when it is not cached)."""
        wanted = {h.record.category_id for h in hits if h.record.category_id}
        corpus = self.memory.cache.corpus_nowait(scope) if wanted else None
        if corpus is None:
            return {}
        found = (corpus.category(cid) for cid in wanted)
        return {c.id: c.abstract for c in found if c is not None and c.abstract}

    async def _deep_run(
        self,
        query: Query,
        hits: list[Hit],
        corpus: Corpus,
        request: MemoryRequest,
        confidence: PrimaryConfidence,
    ) -> DeepResult:
        config, retrieval = request.profile.deep_search, request.profile.retrieval
        deeper = await self._rank_uncached(
            query, request.scope, retrieval, max(config.primary_k, retrieval.top_k)
        )
        seen = {h.record.id for h in hits}
        primary = hits + [h for h in deeper if h.record.id not in seen]
        return await self.deep.run(
            query,
            primary,
            corpus,
            request.scope,
            config,
            retrieval.top_k,
            mode=config.mode,
            profile=request.profile_name,
            confidence=confidence,
        )
