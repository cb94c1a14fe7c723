"""The category tree against a real milvus-lite store: the write path files memories
under categories, ``evolve`` splits, names, merges and supersedes — deterministically,
idempotently, without duplicate rows and without crossing owners."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from sidecar.config import HierarchyBuildConfig
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.read.retrieval.topics import TopicGroups
from sidecar.memory.records.categories import TAXONOMY_SOURCE, category_id, general_id, taxonomy_id
from sidecar.memory.records.records import MemoryRecord, NodeType, Scope, Status, Visibility
from sidecar.memory.records.vectors import centroid
from sidecar.memory.write.rows.locks import KeyedLocks
from sidecar.memory.write.tree.clustering import split_clusters
from sidecar.memory.write.tree.hierarchy import Hierarchy
from sidecar.memory.write.tree.plan import TreePlan, TreePlanner
from tests.memory.hierarchy_support import (
    BOB_FACTS,
    TOPICS,
    Harness,
    interleaved,
    topic_of,
    vocabulary,
)
from tests.support.writes import gateway

MORE_COOKING = (
    "I bake croissants and cinnamon rolls on holidays.",
    "My pasta machine makes thin lasagna sheets for baking.",
    "I bake banana bread with walnuts in a loaf pan.",
    "I cook paella with saffron rice and seafood.",
    "I bake apple pie with a lattice crust.",
    "I cook spaghetti carbonara with eggs and pecorino.",
)


@pytest.fixture
async def harness(tmp_path: Path, embedder: Embedder) -> AsyncIterator[Harness]:
    opened = await Harness.open(tmp_path / "h.db", embedder)
    yield opened
    await opened.close()


def by_category(memories: list[MemoryRecord]) -> dict[str, list[MemoryRecord]]:
    found: dict[str, list[MemoryRecord]] = {}
    for memory in memories:
        found.setdefault(memory.category_id, []).append(memory)
    return found


async def snapshot(harness: Harness, owner: str) -> dict[str, tuple[object, ...]]:
    rows = [*await harness.categories(owner, active_only=False), *await harness.memories(owner)]
    return {
        r.id: (r.status, r.category_id, r.parent_id, r.content, r.abstract, r.updated_at)
        for r in rows
    }


async def test_write_path_files_memories_under_a_general_category(harness: Harness) -> None:
    await harness.write("alice", interleaved())
    await harness.write("bob", BOB_FACTS)
    categories = await harness.categories("alice")
    assert [c.id for c in categories] == [general_id("alice")]
    general = categories[0]
    assert general.node_type == NodeType.CATEGORY
    assert general.visibility == Visibility.USER
    assert general.user_id == "alice"
    assert general.abstract == "general"
    assert general.content.startswith("Category: general")
    assert general.embedding is not None
    assert np.isclose(np.linalg.norm(general.embedding), 1.0, atol=1e-4)
    memories = await harness.memories("alice")
    assert len(memories) == 40
    assert {(m.category_id, m.parent_id) for m in memories} == {(general.id, general.id)}
    # Bob's memories are filed under Bob's own category only.
    assert {m.category_id for m in await harness.memories("bob")} == {general_id("bob")}


async def test_evolve_splits_into_named_topic_categories(harness: Harness) -> None:
    await harness.write("alice", interleaved())
    report = await harness.hierarchy.evolve("alice")
    assert report.created >= 4
    assert report.moved == 40
    assert report.superseded == 1

    categories = {c.id: c for c in await harness.categories("alice")}
    assert general_id("alice") not in categories  # emptied, so superseded
    memories = await harness.memories("alice")
    for cid, members in by_category(memories).items():
        category = categories[cid]
        assert all(m.parent_id == cid for m in members)
        assert not any(c.parent_id == cid for c in categories.values())  # filed in leaves
        topics = Counter(topic_of(m.content) for m in members)
        topic, count = topics.most_common(1)[0]
        assert count / len(members) >= 0.8, (category.abstract, topics)
        name_words = set(category.abstract.replace(",", " ").split())
        assert name_words & vocabulary(topic), (category.abstract, topic)
        assert category.content.startswith(f"Category: {category.abstract}. Covers: ")
        assert "Examples: " in category.content
        assert category.overview == category.content
        expected = centroid(np.asarray([m.embedding for m in members], dtype=np.float32))
        assert category.embedding is not None
        assert float(np.dot(category.embedding, expected)) == pytest.approx(1.0, abs=1e-5)
    covered = {topic_of(m.content) for m in memories}
    assert covered == set(TOPICS)

    # Never deleted: the emptied "general" node is still there, superseded.
    every = {c.id: c for c in await harness.categories("alice", active_only=False)}
    assert every[general_id("alice")].status == Status.SUPERSEDED


async def test_evolve_is_idempotent_and_splits_a_grown_category(harness: Harness) -> None:
    await harness.write("alice", interleaved())
    await harness.hierarchy.evolve("alice")
    before = await snapshot(harness, "alice")
    again = await harness.hierarchy.evolve("alice")
    assert not again.changed
    assert again.passes == 1
    assert await snapshot(harness, "alice") == before

    # Six more cooking facts: the cooking category passes split_min and is split.
    await harness.write("alice", MORE_COOKING, batch=6)
    grown = await harness.hierarchy.evolve("alice")
    assert grown.changed
    categories = {c.id: c for c in await harness.categories("alice")}
    children = [c for c in categories.values() if c.parent_id]
    assert len(children) >= 2
    parent = categories[children[0].parent_id]
    assert {c.parent_id for c in children} == {parent.id}
    assert set(parent.abstract.replace(",", " ").split()) & vocabulary("cooking")
    for child in children:
        assert child.id == category_id("alice", parent.id, child.abstract)
        members = [m for m in await harness.memories("alice") if m.category_id == child.id]
        assert members
        assert all(topic_of(m.content) in {"cooking", "bob"} for m in members)
    # The parent now holds subcategories only; its summary covers all of them.
    assert not [m for m in await harness.memories("alice") if m.category_id == parent.id]
    assert "Examples: " in parent.content
    settled = await snapshot(harness, "alice")
    assert not (await harness.hierarchy.evolve("alice")).changed
    assert await snapshot(harness, "alice") == settled


async def test_same_input_gives_the_same_tree(tmp_path: Path, embedder: Embedder) -> None:
    trees = []
    for name in ("one.db", "two.db"):
        harness = await Harness.open(tmp_path / name, embedder)
        try:
            await harness.write("alice", interleaved())
            await harness.hierarchy.evolve("alice")
            categories = await harness.categories("alice")
            memories = await harness.memories("alice")
            trees.append(
                (
                    sorted((c.id, c.abstract, c.parent_id, c.content) for c in categories),
                    sorted((m.id, m.category_id) for m in memories),
                )
            )
        finally:
            await harness.close()
    assert trees[0] == trees[1]


async def test_bulk_first_write_builds_the_tree_at_once(harness: Harness) -> None:
    rows = await harness.enricher.enrich("alice", await harness.records("alice", interleaved()))
    categories = [r for r in rows if r.node_type == NodeType.CATEGORY]
    assert len(categories) >= 4
    assert all(c.embedding is not None for c in categories)
    await harness.store.upsert(rows)
    harness.cache.invalidate_user("alice")
    assert not (await harness.hierarchy.evolve("alice")).changed  # already evolve's result


async def test_near_identical_siblings_are_merged(harness: Harness) -> None:
    # Two sibling categories over near-duplicate memories (centroid cosine > 0.9).
    music = TOPICS["music"][:5]
    halves = {
        "left": await harness.records("carol", music),
        "right": await harness.records("carol", [f"{fact} Truly." for fact in music], 5),
    }
    nodes = []
    for name, members in halves.items():
        cid = category_id("carol", "", name)
        vector = centroid(np.asarray([m.embedding for m in members], dtype=np.float32))
        nodes.append(
            MemoryRecord(
                id=cid,
                user_id="carol",
                content=f"Category: {name}.",
                embedding=tuple(float(x) for x in vector),
                node_type=NodeType.CATEGORY,
                abstract=name,
            )
        )
        await harness.store.upsert(
            [m.with_changes(category_id=cid, parent_id=cid) for m in members]
        )
    await harness.store.upsert(nodes)
    left, right = sorted(category_id("carol", "", n) for n in halves)

    report = await harness.hierarchy.evolve("carol")
    assert report.superseded == 1
    every = {c.id: c for c in await harness.categories("carol", active_only=False)}
    # Equal sizes: the smaller id keeps its row; the other is superseded, not deleted.
    assert every[right].status == Status.SUPERSEDED
    assert every[right].superseded_by == left
    assert every[left].status == Status.ACTIVE
    assert {m.category_id for m in await harness.memories("carol")} == {left}
    assert not (await harness.hierarchy.evolve("carol")).changed


async def test_concurrent_assigns_create_one_category_row(harness: Harness) -> None:
    records = await harness.records("dave", [f"{t}" for t in BOB_FACTS] + [TOPICS["music"][0]])
    outcomes = await asyncio.gather(*(harness.hierarchy.assign("dave", [r]) for r in records))
    rows = [row for outcome in outcomes for row in outcome]
    assert sum(r.node_type == NodeType.CATEGORY for r in rows) == len(records)  # each made one
    await harness.store.upsert(rows)
    categories = await harness.categories("dave", active_only=False)
    assert [c.id for c in categories] == [general_id("dave")]
    # Concurrent writes and evolves of one owner: still no duplicates.
    await asyncio.gather(
        harness.write("erin", interleaved()[:20], batch=5),
        harness.write("erin", interleaved()[20:], batch=5),
    )
    reports = await asyncio.gather(*(harness.hierarchy.evolve("erin") for _ in range(3)))
    assert reports[0].changed
    assert not reports[1].changed
    assert not reports[2].changed
    active = await harness.categories("erin")
    assert len({c.abstract for c in active}) == len(active)
    assert len({m.id for m in await harness.memories("erin")}) == 40


async def test_evolve_writes_its_plan_under_the_owners_write_lock(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn, an admin edit or retention holding the owner's write lock is never
    interleaved with evolve's read-and-write-back of the memories it moves: evolve
    waits, then moves the rows as they are after the edit (nothing written back stale)."""
    await harness.write("alice", interleaved())
    locks = KeyedLocks()
    hierarchy = Hierarchy(
        harness.store,
        gateway(harness.store, harness.cache, locks=locks),
        harness.cache,
        harness.embedder,
        HierarchyBuildConfig(schedule_s=0),
    )
    planned = asyncio.Event()
    embedded = hierarchy._embedded

    async def embedded_then_signal(plan: TreePlan) -> list[MemoryRecord]:
        rows = await embedded(plan)
        planned.set()  # the plan is ready; next come the writes
        return rows

    monkeypatch.setattr(hierarchy, "_embedded", embedded_then_signal)
    before = {m.id: m for m in await harness.memories("alice")}
    async with locks.get("alice"):
        evolving = asyncio.create_task(hierarchy.evolve("alice"))
        await asyncio.wait_for(planned.wait(), 60)
        await asyncio.sleep(0.3)
        assert not evolving.done()
        assert {m.id: m.category_id for m in await harness.memories("alice")} == {
            i: m.category_id for i, m in before.items()
        }
        # The edit made under the lock (as the writer's UPDATE does).
        edited = {
            i: m.with_changes(content=m.content + " (edited)", updated_at=m.updated_at + 1)
            for i, m in before.items()
        }
        await harness.store.upsert(list(edited.values()))
    report = await evolving
    assert report.moved > 0
    after = {m.id: m for m in await harness.memories("alice")}
    assert {i: m.content for i, m in after.items()} == {i: m.content for i, m in edited.items()}
    assert sum(after[i].category_id != before[i].category_id for i in before) == report.moved


async def test_owners_never_mix(harness: Harness) -> None:
    await harness.write("alice", interleaved())
    await harness.write("bob", BOB_FACTS)
    bob_before = await snapshot(harness, "bob")
    await harness.hierarchy.evolve("alice")
    assert await snapshot(harness, "bob") == bob_before
    alice_categories = {c.id for c in await harness.categories("alice")}
    # Bob's new memories go to Bob's categories, never to Alice's closer ones.
    await harness.write("bob", [TOPICS["cooking"][0] + " Also on Mondays."])
    assert not {m.category_id for m in await harness.memories("bob")} & alice_categories
    assert all(c.user_id == "alice" for c in await harness.categories("alice"))


async def test_schedule_evolves_owners_with_new_memories(
    tmp_path: Path, embedder: Embedder
) -> None:
    config = HierarchyBuildConfig(schedule_s=0.05, max_owners_per_tick=1)
    harness = await Harness.open(tmp_path / "s.db", embedder, config)
    try:
        await harness.write("alice", interleaved())
        await harness.write("bob", BOB_FACTS)
        assert harness.hierarchy.pending == {"alice": 40, "bob": 3}
        reports = await harness.hierarchy.tick()  # bounded: the busiest owner first
        assert [r.owner for r in reports] == ["alice"]
        assert harness.hierarchy.pending == {"bob": 3}
        harness.hierarchy.start()
        for _ in range(100):
            if not harness.hierarchy.pending:
                break
            await asyncio.sleep(0.05)
        assert harness.hierarchy.pending == {}
        assert len(await harness.categories("alice")) >= 4
    finally:
        await harness.close()


def test_split_clusters_is_deterministic_and_respects_sizes() -> None:
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(3, 16))
    points = np.concatenate([c + 0.05 * rng.normal(size=(9, 16)) for c in centres])
    points = (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)
    kwargs = {"max_children": 6, "min_size": 3, "merge_threshold": 0.95, "target_size": 11}
    first = split_clusters(points, **kwargs)  # type: ignore[arg-type]
    assert first == split_clusters(points, **kwargs)  # type: ignore[arg-type]
    assert sorted(len(g) for g in first) == [9, 9, 9]
    assert sorted(i for g in first for i in g) == list(range(27))
    # Identical points cannot be split; too few points for two clusters neither.
    same = np.repeat(points[:1], 12, axis=0)
    assert split_clusters(same, **kwargs) == [list(range(12))]  # type: ignore[arg-type]
    assert split_clusters(points[:5], **kwargs) == [list(range(5))]  # type: ignore[arg-type]


def test_planner_repairs_orphans_and_cycles() -> None:
    vector = tuple(float(x) for x in np.eye(4, dtype=np.float32)[0])
    memories = [
        MemoryRecord(
            id=f"m{i}", user_id="u", content=f"fact {i}", embedding=vector, category_id="gone"
        )
        for i in range(3)
    ]
    cycle = [
        MemoryRecord(
            id=cid,
            user_id="u",
            content="",
            embedding=vector,
            node_type=NodeType.CATEGORY,
            parent_id=parent,
            abstract=cid,
        )
        for cid, parent in (("ca", "cb"), ("cb", "ca"))
    ]
    plan = TreePlanner("u", memories, cycle, HierarchyBuildConfig(), now=1).plan()
    assert set(plan.moves.values()) == {general_id("u")}  # orphans filed in "general"
    assert {r.id for r in plan.superseded} == {"ca", "cb"}  # empty: superseded, not deleted
    assert [c.id for c in plan.categories] == [general_id("u")]


async def test_facts_no_llm_named_are_filed_under_taxonomy_categories(
    tmp_path: Path, embedder: Embedder
) -> None:
    harness = await Harness.open(tmp_path / "t.db", embedder, HierarchyBuildConfig(schedule_s=0))
    try:
        pasta = TOPICS["cooking"][0]
        await harness.write(
            "alice", interleaved(), topic=lambda t: "music" if "guitar" in t else ""
        )
        categories = {c.id: c for c in await harness.categories("alice")}
        food = taxonomy_id("alice", "food")
        assert categories[food].source == TAXONOMY_SOURCE
        assert categories[food].abstract == "food"
        filed = {m.content: m.category_id for m in await harness.memories("alice")}
        assert filed[pasta] == food
        # A topic the writer named stays a topic (retrieval evidence); the taxonomy's
        # categories are not evidence.
        guitar = next(t for t in TOPICS["music"] if "guitar" in t)
        assert categories[filed[guitar]].source == "topic"
        corpus = await harness.cache.corpus(Scope("alice"))
        evidence = TopicGroups.of(corpus, "alice").groups
        members = {corpus.records[i].content for group in evidence for i in group}
        assert pasta not in members
        assert guitar in members
        # evolve keeps a taxonomy category's name and row.
        await harness.hierarchy.evolve("alice")
        after = {c.id: c for c in await harness.categories("alice")}
        assert after[food].abstract == "food"
        assert after[food].source == TAXONOMY_SOURCE
    finally:
        await harness.close()


async def test_the_taxonomy_files_nothing_when_off(harness: Harness) -> None:
    await harness.write("alice", interleaved())
    assert not any(c.source == TAXONOMY_SOURCE for c in await harness.categories("alice"))
