"""The request path's query-vector cache: the TTL'd LRU under it, the cache itself,
and how ``MemoryService`` uses it (only with a user, only for what it lacks)."""

from __future__ import annotations

import numpy as np
import pytest

from sidecar.config import CacheConfig, EmbeddingConfig, Profile, RetrievalConfig
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.read.deep.search import DeepSearcher
from sidecar.memory.read.pipeline import COLD_FALLBACK, MemoryRequest, QueryCaches, RequestPipeline
from sidecar.memory.read.query_cache import QueryVectorCache, RecentRankings
from sidecar.memory.read.retrieval.store_side import STORE_SIDE_STRATEGIES
from sidecar.memory.read.rewrite.rewriter import QueryRewriter
from sidecar.memory.read.service import MemoryService
from sidecar.memory.read.ttl_cache import TtlCache, digest_key
from sidecar.memory.records.records import Hit, MemoryRecord, Scope
from sidecar.metrics import Metrics
from tests.support.fakes import FakeEmbedder, FakeStore


def test_digest_keys_keep_their_parts_apart_and_hold_no_text() -> None:
    assert digest_key("ab", "c") != digest_key("a", "bc")
    assert digest_key("a\x00b", "t") != digest_key("a", "b\x00t")
    assert digest_key("alice", "where do I live?") == digest_key("alice", "where do I live?")
    assert "alice" not in digest_key("alice", "x")
    assert digest_key("\ud800") != digest_key("")  # a lone surrogate is hashed, not refused


def test_ttl_cache_expires_evicts_the_least_recent_and_ignores_zero_settings() -> None:
    now = [0.0]
    cache: TtlCache[int] = TtlCache(clock=lambda: now[0])
    cache.put("a", 1, ttl_s=10, max_entries=2)
    cache.put("b", 2, ttl_s=5, max_entries=2)
    assert cache.get("a") == 1  # "a" is now the most recently used
    cache.put("c", 3, ttl_s=10, max_entries=2)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)
    now[0] = 10.0
    assert cache.get("a") is None
    assert len(cache) == 1
    cache.put("d", 4, ttl_s=0, max_entries=2)
    cache.put("e", 5, ttl_s=10, max_entries=0)
    assert cache.get("d") is None
    assert cache.get("e") is None
    cache.clear()
    assert len(cache) == 0


def test_query_vector_cache_is_per_user_and_keeps_a_read_only_copy() -> None:
    cache = QueryVectorCache(max_entries=8, ttl_s=60)
    vector = np.arange(4, dtype=np.float32)
    cache.put("alice", "where do I live?", vector)
    vector[0] = 99.0  # the caller's array is not the cached one
    kept = cache.get("alice", "where do I live?")
    assert kept is not None
    assert kept.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="read-only"):
        kept[0] = 5.0
    assert cache.get("bob", "where do I live?") is None
    assert cache.get("alice", "where do I live") is None  # exact text only


def test_forgetting_a_user_drops_only_their_entries() -> None:
    cache = QueryVectorCache(max_entries=8, ttl_s=60)
    for user in ("alice", "bob"):
        for text in ("where do I live?", "what is my job?"):
            cache.put(user, text, np.ones(4, dtype=np.float32))
    assert cache.forget("alice") == 2
    assert cache.get("alice", "where do I live?") is None
    assert cache.get("bob", "where do I live?") is not None
    assert len(cache) == 2
    assert cache.forget("alice") == 0


def test_query_vector_cache_is_off_without_entries_or_ttl() -> None:
    assert QueryVectorCache.from_config(EmbeddingConfig(query_cache_entries=0)) is None
    assert QueryVectorCache.from_config(EmbeddingConfig(query_cache_ttl_s=0)) is None
    assert QueryVectorCache.from_config(EmbeddingConfig()) is not None


def pipeline(embedder: FakeEmbedder, cache: QueryVectorCache | None) -> RequestPipeline:
    # Embedding only: the store (and the corpus cache over it) is never touched.
    metrics = Metrics()
    store = FakeStore(embedder.dim)
    memory = MemoryService(store, embedder, CorpusCache(store, CacheConfig(), metrics), {}, metrics)
    caches = QueryCaches(QueryRewriter(None, metrics), cache)
    return RequestPipeline(memory, caches, DeepSearcher(None, metrics), metrics)


def asked(user: str, config: RetrievalConfig) -> MemoryRequest:
    return MemoryRequest(text="", history=(), scope=Scope(user), profile=Profile(retrieval=config))


def lookups(pipe: RequestPipeline) -> dict[str, float]:
    name = "memory_sidecar_query_vector_cache_lookups_total"
    return {o: pipe._metrics.value(name, {"outcome": o}) for o in ("hit", "miss")}


async def test_a_repeated_request_query_skips_the_model() -> None:
    embedder = FakeEmbedder()
    pipe = pipeline(embedder, QueryVectorCache(max_entries=16, ttl_s=60))
    config = RetrievalConfig(max_query_chars=16)
    (first,) = await pipe.embed(["where do I live these days?"], asked("alice", config))
    (again,) = await pipe.embed(["where do I live these days?"], asked("alice", config))
    # Focused to the budget before it is keyed (a question too long for it: its
    # head and tail).
    assert embedder.calls == [["where\ndays?"]]
    assert again.text == first.text
    assert again.vector.tolist() == first.vector.tolist()
    assert lookups(pipe) == {"hit": 1, "miss": 1}
    # Another user, or the plain search (eval, admin search), runs the model.
    await pipe.embed(["where do I live these days?"], asked("bob", config))
    await pipe.memory.embed(["where do I live these days?"], config)
    assert len(embedder.calls) == 3
    assert lookups(pipe) == {"hit": 1, "miss": 2}
    assert isinstance(pipe.memory.store, FakeStore)
    assert not pipe.memory.store.calls


async def test_a_pair_embeds_only_the_text_it_lacks_and_keeps_order() -> None:
    embedder = FakeEmbedder()
    pipe = pipeline(embedder, QueryVectorCache(max_entries=16, ttl_s=60))
    config = RetrievalConfig()
    await pipe.embed(["what about it?"], asked("alice", config))
    pair = await pipe.embed(["where is Ana's flat?", "what about it?"], asked("alice", config))
    assert embedder.calls[-1] == ["where is Ana's flat?"]
    assert [q.text for q in pair] == ["where is Ana's flat?", "what about it?"]
    expected = [embedder.vector(t).tolist() for t in ("where is Ana's flat?", "what about it?")]
    assert expected[0] != expected[1]
    assert [q.vector.tolist() for q in pair] == expected
    assert lookups(pipe) == {"hit": 1, "miss": 2}


async def test_without_a_cache_every_query_is_embedded() -> None:
    embedder = FakeEmbedder()
    pipe = pipeline(embedder, None)
    for _ in range(2):
        await pipe.embed(["where do I live?"], asked("alice", RetrievalConfig()))
    assert len(embedder.calls) == 2
    assert lookups(pipe) == {"hit": 0, "miss": 0}


def test_rankings_are_kept_per_strategy_k_text_and_settings_object() -> None:
    now = [0.0]
    rankings = RecentRankings(clock=lambda: now[0])
    config = RetrievalConfig(ranking_cache_ttl_s=60, ranking_cache_entries=2)
    record = MemoryRecord(id="m1", user_id="alice", content="User lives in Berlin.")
    hits = [Hit(record, 0.9)]
    rankings.put("default", 5, "where do I live?", config, hits)
    found = rankings.get("default", 5, "where do I live?", config)
    assert found == hits
    assert found is not hits  # a list of its own: the caller may extend it
    found.append(Hit(record, 0.1))
    assert rankings.get("default", 5, "where do I live?", config) == hits
    assert rankings.get("dense", 5, "where do I live?", config) is None
    assert rankings.get("default", 6, "where do I live?", config) is None
    assert rankings.get("default", 5, "where do I live", config) is None
    # Equal settings in another object (another profile) do not share rankings.
    assert rankings.get("default", 5, "where do I live?", config.model_copy()) is None
    now[0] = 61.0
    assert rankings.get("default", 5, "where do I live?", config) is None


def test_the_cold_fallback_is_store_side_so_never_kept_as_a_ranking() -> None:
    # The cold path ranks against a throwaway empty snapshot; search() keeps no
    # ranking for store-side strategies, which covers it.
    assert COLD_FALLBACK in STORE_SIDE_STRATEGIES
