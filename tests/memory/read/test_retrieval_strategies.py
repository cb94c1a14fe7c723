"""``hierarchical`` and ``tiered`` over a hierarchy the write path built (milvus-lite):
they find the right memories, say how far they searched and why they stopped, and
never leave the scope."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest

from sidecar.config import RetrievalConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.retrieval.hierarchical import (
    CategoryTree,
    HierarchicalRetriever,
    subtree_evidence,
)
from sidecar.memory.read.retrieval.pipeline import PipelineRetriever
from sidecar.memory.read.retrieval.registry import build_retrievers
from sidecar.memory.read.retrieval.tiered import TieredRetriever
from sidecar.memory.read.service import MemoryService
from sidecar.memory.records.records import MemoryRecord, NodeType, Scope
from sidecar.metrics import Metrics
from tests.memory.hierarchy_support import BOB_FACTS, QUERIES, TOPICS, Harness, interleaved

STOPS = {"converged", "max_rounds", "exhausted", "no_categories"}


@pytest.fixture(scope="module")
async def built(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
) -> AsyncIterator[Harness]:
    harness = await Harness.open(tmp_path_factory.mktemp("strategies") / "r.db", embedder)
    await harness.write("alice", interleaved())
    await harness.write("bob", BOB_FACTS)
    await harness.hierarchy.evolve("alice")
    await harness.hierarchy.evolve("bob")
    yield harness
    await harness.close()


async def query(harness: Harness, text: str) -> Query:
    return Query(text, (await harness.embedder.embed([text]))[0])


def config(**hierarchy: object) -> RetrievalConfig:
    base = RetrievalConfig()
    return base.model_copy(update={"hierarchy": base.hierarchy.model_copy(update=hierarchy)})


def recall(ids: list[str], topic: str, harness_ids: dict[str, str]) -> float:
    return sum(harness_ids.get(i) == topic for i in ids) / len(TOPICS[topic])


async def topic_ids(harness: Harness) -> dict[str, str]:
    out = {}
    for memory in await harness.memories("alice"):
        for topic, facts in TOPICS.items():
            if memory.content in facts:
                out[memory.id] = topic
    return out


async def test_hierarchical_finds_topics_at_least_as_well_as_hybrid(built: Harness) -> None:
    corpus = await built.cache.corpus(Scope("alice"))
    assert len(corpus.categories) >= 4  # the write path built a hierarchy
    topics = await topic_ids(built)
    hierarchical, hybrid = HierarchicalRetriever(), PipelineRetriever("hybrid", base="fused")
    totals = {"hierarchical": 0.0, "hybrid": 0.0}
    for topic, text in QUERIES.items():
        q = await query(built, text)
        hits, stats = hierarchical.search(q, corpus, RetrievalConfig(), 10, "alice")
        assert stats.stop in STOPS
        assert stats.rounds >= 1
        assert stats.opened >= 1
        ids = [h.record.id for h in hits]
        assert sum(topics.get(i) == topic for i in ids[:5]) >= 4, topic
        totals["hierarchical"] += recall(ids, topic, topics)
        flat = hybrid.rank(q, corpus, RetrievalConfig(), 10).hits(corpus, 10)
        totals["hybrid"] += recall([h.record.id for h in flat], topic, topics)
        for hit in hits:
            assert hit.record.node_type == NodeType.MEMORY
            assert hit.signals["rounds"] == stats.rounds
            assert hit.signals[f"stop_{stats.stop}"] == 1.0
    assert totals["hierarchical"] >= totals["hybrid"]


async def test_drill_down_raises_members_of_relevant_categories(built: Harness) -> None:
    corpus = await built.cache.corpus(Scope("alice"))
    hits, stats = HierarchicalRetriever().search(
        await query(built, QUERIES["hiking"]), corpus, config(max_rounds=1000), 10, "alice"
    )
    raised = [h for h in hits if h.via == "category"]
    assert stats.raised >= len(raised) > 0
    for hit in raised:
        assert hit.score > hit.signals["fused"]  # the category lifted it
        assert hit.score == pytest.approx(
            0.8 * hit.signals["fused"] + 0.2 * hit.signals["category"]
        )


async def test_convergence_stops_early(built: Harness) -> None:
    corpus = await built.cache.corpus(Scope("alice"))
    q = await query(built, QUERIES["music"])
    retriever = HierarchicalRetriever()
    _, full = retriever.search(
        q, corpus, config(convergence_rounds=100, max_rounds=10_000), 3, "alice"
    )
    _, early = retriever.search(
        q, corpus, config(convergence_rounds=1, max_rounds=10_000), 3, "alice"
    )
    _, capped = retriever.search(q, corpus, config(max_rounds=2), 3, "alice")
    assert full.stop == "exhausted"
    assert early.stop == "converged"
    assert early.rounds < full.rounds
    assert capped.stop == "max_rounds"
    assert capped.rounds == 2
    # Deterministic: the same query gives the same ranking and the same stats.
    again = retriever.search(q, corpus, config(convergence_rounds=1, max_rounds=10_000), 3, "alice")
    assert again[1] == early


async def test_without_categories_it_is_hybrid(built: Harness) -> None:
    corpus = await built.cache.corpus(Scope("alice"))
    flat = Corpus.build(corpus.records, built.store.dim)  # memories only
    q = await query(built, QUERIES["cooking"])
    hits, stats = HierarchicalRetriever().search(q, flat, RetrievalConfig(), 5, "alice")
    assert stats.stop == "no_categories"
    assert stats.rounds == 0
    hybrid = PipelineRetriever("hybrid", base="fused").rank(q, flat, RetrievalConfig(), 5)
    assert [h.record.id for h in hits] == [h.record.id for h in hybrid.hits(flat, 5)]


async def test_scope_is_respected(built: Harness) -> None:
    service = MemoryService(built.store, built.embedder, built.cache, build_retrievers(), Metrics())
    for strategy in ("hierarchical", "tiered"):
        settings = RetrievalConfig(strategy=strategy, top_k=20, threshold=-1, lexical_threshold=0)
        for text in QUERIES.values():
            (q,) = await service.embed([text], settings)
            bob_hits = await service.search(q, Scope("bob"), settings)
            assert bob_hits
            assert all(h.record.user_id == "bob" for h in bob_hits)
            alice_hits = await service.search(q, Scope("alice"), settings)
            assert all(h.record.user_id == "alice" for h in alice_hits)
            assert all(h.record.node_type == NodeType.MEMORY for h in alice_hits + bob_hits)
    # Another user's categories in a corpus are never used to drill down.
    alice = await built.cache.corpus(Scope("alice"))
    bob = await built.cache.corpus(Scope("bob"))
    mixed = Corpus.build([*alice.records, *alice.categories, *bob.categories], built.store.dim)
    tree = CategoryTree.of(mixed, "alice")
    assert all(mixed.categories[i].user_id == "alice" for i in tree.usable)
    assert len(tree.usable) == len(alice.categories)


async def test_tiered_stops_at_the_first_sufficient_tier(built: Harness) -> None:
    corpus = await built.cache.corpus(Scope("alice"))
    q = await query(built, "hiking boots trail mountain")
    retriever = TieredRetriever()
    easy = RetrievalConfig(
        tiered=RetrievalConfig().tiered.model_copy(update={"min_avg_score": 0.3})
    )
    hits, stats = retriever.search(q, corpus, easy, 5)
    assert (stats.tiers, stats.tier, stats.stop) == (1, "abstract", "sufficient")
    assert stats.mean_score >= 0.3
    assert hits
    assert all(h.signals["tiers"] == 1 and h.signals["stop_sufficient"] == 1 for h in hits)
    assert "hik" in hits[0].record.content.lower()

    strict = RetrievalConfig(
        tiered=RetrievalConfig().tiered.model_copy(update={"min_avg_score": 1.0})
    )
    deep, deep_stats = retriever.search(q, corpus, strict, 5)
    assert (deep_stats.tiers, deep_stats.tier, deep_stats.stop) == (3, "content", "last_tier")
    hybrid = PipelineRetriever("hybrid", base="fused").rank(q, corpus, strict, 5).hits(corpus, 5)
    assert [h.record.id for h in deep] == [h.record.id for h in hybrid]  # L2 is hybrid


async def test_tiered_caches_tier_indexes_per_corpus(built: Harness) -> None:
    corpus = await built.cache.corpus(Scope("alice"))
    retriever = TieredRetriever()
    q = await query(built, QUERIES["programming"])
    first = retriever.search(q, corpus, RetrievalConfig(), 5)
    second = retriever.search(q, corpus, RetrievalConfig(), 5)
    assert [h.record.id for h in first[0]] == [h.record.id for h in second[0]]
    assert first[1] == second[1]
    assert len(retriever._indexes) == 1


def test_registry_has_both_strategies() -> None:
    retrievers = build_retrievers()
    assert isinstance(retrievers["hierarchical"], HierarchicalRetriever)
    assert isinstance(retrievers["tiered"], TieredRetriever)


def test_empty_corpus(embedder: Embedder) -> None:
    empty = Corpus.build([], embedder.dim)
    vector = np.zeros(embedder.dim, dtype=np.float32)
    hits, stats = HierarchicalRetriever().search(
        Query("x", vector), empty, RetrievalConfig(), 5, "u"
    )
    assert hits == []
    assert stats.stop == "no_categories"
    tiered_hits, tier_stats = TieredRetriever().search(
        Query("x", vector), empty, RetrievalConfig(), 5
    )
    assert tiered_hits == []
    assert tier_stats.tiers == 0


def test_member_evidence_flows_up_the_category_tree() -> None:
    def node(cid: str, parent: str = "") -> MemoryRecord:
        return MemoryRecord(
            id=cid, user_id="u", content=cid, embedding=(1.0, 0.0), node_type=NodeType.CATEGORY,
            parent_id=parent,
        )  # fmt: skip

    def leaf_member(mid: str, home: str) -> MemoryRecord:
        return MemoryRecord(
            id=mid, user_id="u", content=mid, embedding=(0.0, 1.0), category_id=home,
            parent_id=home,
        )  # fmt: skip

    corpus = Corpus.build(
        [
            node("root"),
            node("left", "root"),
            node("right", "root"),
            node("other"),
            leaf_member("a", "left"),
            leaf_member("b", "right"),
            leaf_member("c", "other"),
        ],
        2,
    )
    tree = CategoryTree.of(corpus, "u")
    scores = np.asarray([0.9, 0.4, 0.7], dtype=np.float32)  # a, b, c
    gate = np.asarray([False, True, True])
    evidence = subtree_evidence(tree, len(corpus.categories), scores, gate)
    named = {c.id: float(evidence[i]) for i, c in enumerate(corpus.categories)}
    # "a" is not gated: it lends no evidence; the root gets its best child's.
    assert named == pytest.approx({"root": 0.4, "left": 0.0, "right": 0.4, "other": 0.7})
