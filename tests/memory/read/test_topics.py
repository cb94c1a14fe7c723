"""Named topics: the write path files memories under one row per topic name, evolve
keeps topics (never merges two, may split a big one), extraction reads the LLM's
topic, and the ``default`` strategy lifts the members of relevant topics together —
while a corpus without topics ranks exactly as before."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from sidecar.config import HierarchyBuildConfig, RetrievalConfig, TopicConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.retrieval.pipeline import PipelineRetriever
from sidecar.memory.read.retrieval.registry import build_retrievers
from sidecar.memory.read.retrieval.topics import TopicGroups, expand_topics
from sidecar.memory.records.categories import (
    TOPIC_SOURCE,
    is_topic,
    topic_id,
    topic_name,
    topic_node,
)
from sidecar.memory.records.records import MemoryRecord, NodeType, Status
from sidecar.memory.records.vectors import centroid
from sidecar.memory.write.turns.extraction import parse_facts
from tests.memory.hierarchy_support import TOPICS, Harness, interleaved, topic_of
from tests.support.vectors import unit


@pytest.fixture
async def harness(tmp_path: Path, embedder: Embedder) -> AsyncIterator[Harness]:
    opened = await Harness.open(tmp_path / "t.db", embedder)
    yield opened
    await opened.close()


def shouted(text: str) -> str:
    """The topic with varying case and spacing: still one topic."""
    name = topic_of(text)
    return f"  {name.upper()} " if len(text) % 2 else name.title()


async def test_memories_with_a_topic_are_filed_under_one_row_per_name(harness: Harness) -> None:
    await harness.write("alice", interleaved(), topic=shouted)
    categories = {c.id: c for c in await harness.categories("alice")}
    assert set(categories) == {topic_id("alice", t) for t in TOPICS}
    for category in categories.values():
        assert is_topic(category)
        assert category.source == TOPIC_SOURCE
        assert category.parent_id == ""
        assert category.embedding is not None
    for memory in await harness.memories("alice"):
        home = topic_id("alice", topic_of(memory.content))
        assert (memory.category_id, memory.parent_id) == (home, home)
    # Another owner's topic of the same name is another row.
    assert topic_id("bob", "music") != topic_id("alice", "music")


async def test_concurrent_writers_of_one_topic_create_the_same_row(harness: Harness) -> None:
    records = await harness.records("dave", TOPICS["music"][:4])
    outcomes = await asyncio.gather(
        *(harness.hierarchy.assign("dave", [r], {r.id: "Music"}) for r in records)
    )
    rows = [row for outcome in outcomes for row in outcome]
    created = [r for r in rows if r.node_type == NodeType.CATEGORY]
    assert {r.id for r in created} == {topic_id("dave", "music")}
    await harness.store.upsert(rows)
    assert [c.id for c in await harness.categories("dave")] == [topic_id("dave", "music")]


async def test_memories_without_a_topic_still_go_by_similarity(harness: Harness) -> None:
    texts = interleaved()[:8]
    await harness.write("erin", texts, topic=lambda t: "cooking" if "cook" in t else "")
    memories = await harness.memories("erin")
    cooking = topic_id("erin", "cooking")
    assert {m.category_id == cooking for m in memories} == {True, False}
    assert all(m.category_id for m in memories)


async def test_evolve_keeps_topics_and_never_merges_two(harness: Harness) -> None:
    # Two topics over near-duplicate memories (centroid cosine > merge_threshold).
    music = TOPICS["music"][:5]
    left = await harness.records("carol", music)
    right = await harness.records("carol", [f"{fact} Truly." for fact in music], 5)
    for name, members in (("left", left), ("right", right)):
        vector = centroid(np.asarray([m.embedding for m in members], dtype=np.float32))
        await harness.store.upsert([topic_node("carol", name, vector, 1)])
        tid = topic_id("carol", name)
        await harness.store.upsert(
            [m.with_changes(category_id=tid, parent_id=tid) for m in members]
        )
    await harness.hierarchy.evolve("carol")
    active = {c.id: c for c in await harness.categories("carol")}
    assert set(active) == {topic_id("carol", "left"), topic_id("carol", "right")}
    assert {c.abstract for c in active.values()} == {"left", "right"}
    assert all(is_topic(c) for c in active.values())
    assert not (await harness.hierarchy.evolve("carol")).changed


async def test_a_big_topic_is_split_and_new_members_go_to_its_nearest_leaf(
    tmp_path: Path, embedder: Embedder
) -> None:
    config = HierarchyBuildConfig(schedule_s=0, split_min=12, min_size=3)
    harness = await Harness.open(tmp_path / "split.db", embedder, config)
    try:
        hobbies = [*TOPICS["cooking"][:8], *TOPICS["hiking"][:8]]
        await harness.write("frank", hobbies, topic=lambda _t: "hobbies")
        await harness.hierarchy.evolve("frank")
        every = {c.id: c for c in await harness.categories("frank")}
        root = topic_id("frank", "hobbies")
        assert root in every
        assert every[root].abstract == "hobbies"
        children = [c for c in every.values() if c.parent_id == root]
        assert len(children) >= 2
        await harness.write("frank", [TOPICS["hiking"][9]], topic=lambda _t: "Hobbies")
        stored = await harness.memories("frank")
        newest = next(m for m in stored if m.content == TOPICS["hiking"][9])
        hiking_leaf = max(
            children,
            key=lambda c: sum(
                m.category_id == c.id and topic_of(m.content) == "hiking" for m in stored
            ),
        )
        assert newest.category_id == hiking_leaf.id
    finally:
        await harness.close()


def test_topic_names_are_normalised_and_bounded() -> None:
    assert topic_name("  Work \n stuff ") == "Work stuff"
    assert topic_name("   ") == ""
    assert len(topic_name("x" * 500)) == 80
    assert topic_id("u", "Work  Stuff") == topic_id("u", "work stuff")


def test_extraction_reads_the_llm_topic() -> None:
    facts = parse_facts(
        {
            "facts": [
                {"text": "User plays the cello.", "topic": "  Music  "},
                {"text": "User lives in Oslo.", "topic": 7},
                {"text": "User likes tea."},
            ]
        },
        max_facts=10,
    )
    assert [f.topic for f in facts] == ["Music", "", ""]


# -- retrieval -------------------------------------------------------------------------

DIM = 4


def memory(rid: str, text: str, vector: tuple[float, ...], home: str = "") -> MemoryRecord:
    return MemoryRecord(
        id=rid, user_id="u", content=text, embedding=vector, category_id=home, parent_id=home
    )


PETS = topic_id("u", "pets")
PET_TOPIC = topic_node("u", "pets", np.asarray(unit(1, 0, 0, 0), dtype=np.float32), 1)
RECORDS = [
    memory("a", "User adopted a greyhound called Juniper.", unit(1, 0, 0, 0), PETS),
    memory("b", "The vet appointment is on Friday morning.", unit(0, 0.3, 0, 1), PETS),
    memory("c", "User works night shifts at the hospital.", unit(0, 1, 0, 0)),
    memory("d", "User's favourite meal is ramen.", unit(0, 0.2, 0, 1)),
    memory("e", "Juniper sleeps on the blue sofa.", unit(0.1, 0, 1, 0.2), PETS),
]


def query(text: str, *values: float) -> Query:
    return Query(text, np.asarray(unit(*values), dtype=np.float32))


def ids(name: str, corpus: Corpus, q: Query, cfg: RetrievalConfig, k: int = 5) -> list[str]:
    retriever = build_retrievers()[name]
    assert isinstance(retriever, PipelineRetriever)
    return [corpus.records[i].id for i in retriever.rank(q, corpus, cfg, k, "u").order[:k]]


def test_members_of_a_relevant_topic_rise_together() -> None:
    corpus = Corpus.build([*RECORDS, PET_TOPIC], DIM)
    q = query("Tell me about my greyhound Juniper", 1, 0, 0, 0.1)
    plain = Corpus.build([r.with_changes(category_id="") for r in RECORDS], DIM)
    assert ids("default", plain, q, RetrievalConfig())[:3] != ["a", "e", "b"]
    assert ids("default", corpus, q, RetrievalConfig())[:3] == ["a", "e", "b"]
    off = RetrievalConfig(topics=TopicConfig(enabled=False))
    assert ids("default", corpus, q, off) == ids("default", plain, q, off)


def test_a_store_without_topics_ranks_exactly_as_hybrid_with_links() -> None:
    corpus = Corpus.build([r.with_changes(category_id="") for r in RECORDS], DIM)
    q = query("ramen and night shifts", 0, 1, 0, 1)
    on = build_retrievers()["default"]
    assert isinstance(on, PipelineRetriever)
    without = PipelineRetriever("default", base="fused", links=True, rerank=True)
    a = on.rank(q, corpus, RetrievalConfig(), 5, "u")
    b = without.rank(q, corpus, RetrievalConfig(), 5, "u")
    assert a.order == b.order
    assert np.array_equal(a.scores, b.scores)


def test_a_topic_without_evidence_is_not_opened() -> None:
    corpus = Corpus.build([*RECORDS, PET_TOPIC], DIM)
    groups = TopicGroups.of(corpus, "u")
    assert len(groups.groups) == 1
    scores = np.asarray([0.9, 0.1, 0.5, 0.4, 0.2], dtype=np.float32)
    nothing = np.zeros(5, dtype=bool)
    out, gate, raised = expand_topics(scores, nothing, groups, TopicConfig())
    assert np.array_equal(out, scores)
    assert not gate.any()
    assert raised == {}
    gated = np.asarray([True, False, True, False, False])
    out, gate, raised = expand_topics(scores, gated, groups, TopicConfig(alpha=0.2))
    assert gate.tolist() == [True, True, True, False, True]
    assert out[1] == pytest.approx(0.2 * 0.1 + 0.8 * 0.9)
    assert out[0] == pytest.approx(0.9)  # the best member keeps its own score
    assert set(raised) == {1, 4}


def test_a_big_topic_lifts_only_its_best_members() -> None:
    groups = TopicGroups((np.arange(6, dtype=np.int64),))
    scores = np.asarray([0.9, 0.1, 0.5, 0.2, 0.4, 0.3, 0.8], dtype=np.float32)
    gate = np.asarray([True, False, False, False, False, False, True])
    out, admitted, raised = expand_topics(scores, gate, groups, TopicConfig(max_members=3))
    assert set(raised) == {2, 4}  # the best three are 0, 2, 4; 0 keeps its own score
    assert admitted.tolist() == [True, False, True, False, True, False, True]
    assert out[1] == scores[1]


def test_only_the_scope_users_topics_count() -> None:
    foreign = PET_TOPIC.with_changes(user_id="someone-else")
    corpus = Corpus.build([*RECORDS, foreign], DIM)
    assert TopicGroups.of(corpus, "u").groups == ()
    superseded_members = Corpus.build(
        [*(r.with_changes(status=Status.SUPERSEDED) for r in RECORDS[:1]), *RECORDS[1:]], DIM
    )
    assert superseded_members.size == len(RECORDS) - 1
