"""Deletes across workers: a delete or forget on one worker reaches the other
workers' caches at their next delta refresh (not their next full reload), leaves
no text behind, and is purged once every cache has had time to see it."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from sidecar.admin.service import NotFound
from sidecar.memory.corpus import cache as corpus_cache
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import NodeType, Scope, Status, now_ms
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.tombstones import forgotten_since, purge
from sidecar.runtime.components import Components
from tests.memory.write import test_write_concurrency as concurrency

FACTS = ["I have a dog named Rex.", "I play the cello.", "I live in Lisbon."]


async def test_forget_on_one_worker_empties_the_other_workers_cache(
    tmp_path: Path, embedder: Embedder
) -> None:
    async with concurrency.two_workers(tmp_path, embedder) as (first, second):
        turn = concurrency.make_turn("gone", 1, FACTS)
        assert (await first.write.writer.write_turn(turn)).stored == 3
        stayed = concurrency.make_turn("stays", 1, FACTS[:1])
        assert (await first.write.writer.write_turn(stayed)).stored == 1
        cache = second.read.memory.cache
        for user in ("gone", "stays"):
            await cache.corpus(Scope(user))
        assert len((await cache.corpus(Scope("gone"))).records) == 3
        await cache.refresh()

        report = await first.memory_admin().forget("gone")
        assert report.memories == {"active": 3}
        # Gone from the store's reads and from this worker's cache at once...
        everything = build_filter(owner="gone", node_type=None, status=None)
        assert await first.store.scan(everything) == []
        assert (await first.read.memory.cache.corpus(Scope("gone"))).size == 0
        # ...and from the other worker's at its next delta refresh.
        await cache.refresh()
        assert (await cache.corpus(Scope("gone"))).size == 0
        assert len((await cache.corpus(Scope("stays"))).records) == 1
        # What is left: hollow rows, no text, links or categories.
        graves = await first.store.scan(
            build_filter(owner="gone", node_type=None, status=None, deleted=True)
        )
        assert graves
        assert {g.status for g in graves} == {Status.DELETED}
        assert all(g.content == g.abstract == g.overview == "" for g in graves)
        assert all(not g.related_ids and not g.category_id for g in graves)
        assert {g.node_type for g in graves} <= {NodeType.MEMORY, NodeType.CATEGORY}
        with pytest.raises(NotFound):
            await second.memory_admin().get("gone", graves[0].id)

        # Saying it again stores it again (over its tombstone), for both workers.
        again = replace(concurrency.make_turn("gone", 2, FACTS[:1]), created_at=now_ms() + 1)
        assert (await second.write.writer.write_turn(again)).stored == 1
        await first.read.memory.cache.refresh()
        [row] = (await first.read.memory.cache.corpus(Scope("gone"))).records
        assert row.content == "User has a dog named Rex."


async def test_a_deleted_memory_leaves_the_other_workers_cache_and_is_purged(
    tmp_path: Path, embedder: Embedder
) -> None:
    async with concurrency.two_workers(tmp_path, embedder) as (first, second):
        turn = concurrency.make_turn("owner", 1, FACTS[:2])
        assert (await first.write.writer.write_turn(turn)).stored == 2
        cache = second.read.memory.cache
        held = await cache.corpus(Scope("owner"))
        assert len(held.records) == 2
        await cache.refresh()
        victim = next(r for r in held.records if "cello" in r.content)

        await first.memory_admin().delete("owner", victim.id)
        await cache.refresh()
        assert victim.id not in (await cache.corpus(Scope("owner"))).index_of
        deleted = build_filter(owner="owner", status=Status.DELETED)
        assert await first.store.count(deleted) == 1

        assert await purge(first.store, older_than_ms=3_600_000) == 0  # too recent
        assert first.write.retention is not None
        assert await first.write.retention.purge_tombstones() == 0  # 2 x full_reload_s
        assert await purge(first.store, older_than_ms=-1_000) == 1
        assert await first.store.count(deleted) == 0
        assert await first.store.count(build_filter(owner="owner")) == 1


async def test_a_turn_accepted_before_a_forget_is_not_written_by_any_worker(
    tmp_path: Path, embedder: Embedder
) -> None:
    """The other worker's queue still holds a turn of the user when they are
    forgotten through this one: it is dropped, not written; a turn accepted after
    the forget is stored as usual."""
    async with concurrency.two_workers(tmp_path, embedder) as (first, second):
        before = replace(concurrency.make_turn("fay", 1, FACTS[:2]), created_at=now_ms() - 1_000)
        await first.memory_admin().forget("fay")
        assert (await second.write.writer.write_turn(before)).stored == 0
        assert await second.store.scan(build_filter(owner="fay")) == []
        dropped = second.metrics.value(
            "memory_sidecar_facts_total", {"decision": "dropped_forgotten"}
        )
        assert dropped == 2
        after = replace(concurrency.make_turn("fay", 2, FACTS[:1]), created_at=now_ms() + 1_000)
        assert (await second.write.writer.write_turn(after)).stored == 1
        assert len(await first.store.scan(build_filter(owner="fay"))) == 1
        assert await forgotten_since(first.store, "fay") is not None


async def test_forget_without_the_running_sidecars_journal_still_stops_its_turns(
    tmp_path: Path, embedder: Embedder
) -> None:
    """A forget from the CLI (no journal of the running sidecar to discard from):
    the sidecar's writer drops the user's turns accepted before it."""
    components = await concurrency.build(tmp_path, embedder)
    try:
        admin = components.memory_admin()  # no journal
        queued = replace(concurrency.make_turn("cli", 1, FACTS[:1]), created_at=now_ms() - 1_000)
        assert (await components.write.writer.write_turn(queued)).stored == 1
        report = await admin.forget("cli")
        assert report.journal is None
        assert (await components.write.writer.write_turn(queued)).stored == 0  # a retry, say
        assert await components.store.scan(build_filter(owner="cli")) == []
    finally:
        await components.close()


async def test_imported_rows_reach_the_other_workers_cache_at_its_next_refresh(
    tmp_path: Path, embedder: Embedder
) -> None:
    """Imported rows keep their original times, so a delta refresh alone would miss
    them; the import's reload marker makes the other worker reload the user."""
    async with concurrency.two_workers(tmp_path, embedder) as (first, second):
        cache = second.read.memory.cache
        assert (await cache.corpus(Scope("restored"))).size == 0
        await cache.refresh()
        lines = [
            json.dumps({"content": text, "created_at": 1_600_000_000_000 + i})
            for i, text in enumerate(["User has a dog named Rex.", "User lives in Lisbon."])
        ]
        report = await first.memory_admin().import_lines("restored", lines)
        assert report.memories == 2
        await cache.refresh()
        rows = (await cache.corpus(Scope("restored"))).records
        assert sorted(r.content for r in rows) == [
            "User has a dog named Rex.",
            "User lives in Lisbon.",
        ]
        assert {r.updated_at for r in rows} == {1_600_000_000_000, 1_600_000_000_001}


async def test_category_moves_reach_the_other_workers_cache_at_its_next_refresh(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """evolve moves memories between categories without touching their updated_at;
    its reload marker makes the other worker reload the owner."""
    # Refreshes re-read rows written within the clock skew: none here, so only the
    # marker can bring the moves in.
    monkeypatch.setattr(corpus_cache, "CLOCK_SKEW_MS", 0)
    # Filed by clustering alone (no taxonomy topics), so evolve has memories to move.
    clustering_only = {"schedule_s": 0, "taxonomy": {"enabled": False}}
    async with concurrency.two_workers(tmp_path, embedder, hierarchy=clustering_only) as (
        first,
        second,
    ):
        turns = [
            replace(concurrency.make_turn("tree", i, [s]), created_at=now_ms())
            for i, s in enumerate(concurrency.SENTENCES)
        ]
        for turn in turns:
            await first.write.writer.write_turn(turn)
        cache = second.read.memory.cache
        before = {r.id: r.category_id for r in (await cache.corpus(Scope("tree"))).records}
        await asyncio.sleep(0.05)
        await cache.refresh()
        assert first.write.hierarchy is not None
        report = await first.write.hierarchy.evolve("tree")
        assert report.moved > 0
        await cache.refresh()
        after = {r.id: r.category_id for r in (await cache.corpus(Scope("tree"))).records}
        stored = {r.id: r.category_id for r in await first.store.scan(build_filter(owner="tree"))}
        assert after == stored != before


def _queries(components: Components) -> float:
    return components.metrics.value("memory_sidecar_store_seconds_count", {"operation": "query"})


async def test_the_only_writer_reads_an_owners_forget_marker_once_and_keeps_its_own(
    tmp_path: Path, embedder: Embedder
) -> None:
    """One process over its milvus-lite file is the store's only writer: it reads an
    owner's forget marker for their first turn, then keeps it, and its own forget
    updates what it keeps, so a turn accepted before that forget is still dropped."""
    components = await concurrency.build(tmp_path, embedder)
    try:
        assert not components.config.shares_store
        writer = components.write.writer
        assert (await writer.write_turn(concurrency.make_turn("fay", 1, FACTS[:1]))).stored == 1
        reads = _queries(components)
        assert (await writer.write_turn(concurrency.make_turn("fay", 2, FACTS[1:2]))).stored == 1
        assert _queries(components) == reads  # the marker was not read again
        accepted = replace(concurrency.make_turn("fay", 3, FACTS[2:]), created_at=now_ms() - 1)
        await components.memory_admin().forget("fay")
        assert (await writer.write_turn(accepted)).stored == 0
        assert await components.store.scan(build_filter(owner="fay")) == []
        later = replace(concurrency.make_turn("fay", 4, FACTS[2:]), created_at=now_ms() + 1_000)
        assert (await writer.write_turn(later)).stored == 1
    finally:
        await components.close()


async def test_workers_sharing_a_store_read_the_marker_for_every_turn(
    tmp_path: Path, embedder: Embedder
) -> None:
    async with concurrency.two_workers(tmp_path, embedder) as (_, second):
        assert second.config.shares_store
        for n in (1, 2):
            reads = _queries(second)
            await second.write.writer.write_turn(concurrency.make_turn("gil", n, FACTS[n : n + 1]))
            assert _queries(second) == reads + 1
