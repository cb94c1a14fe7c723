"""Retention (the per-user cap) and retrieval access tracking against a real store:
who is pruned and in which order, constraints last, archive versus delete, the
corpus cache, the schedule, and access counts that change the order — and nothing
else changes."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sidecar.config import CacheConfig, RetentionConfig, StoreConfig
from sidecar.errors import StoreError
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.model.records import Hit, MemoryRecord, MemoryType, Scope, Status, Visibility
from sidecar.memory.model.turns import Turn
from sidecar.memory.read.corpus_cache import CorpusCache
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.write.access import AccessTracker
from sidecar.memory.write.locks import KeyedLocks
from sidecar.memory.write.retention import Retention, prune_order, retention_score
from sidecar.metrics import Metrics
from sidecar.runtime.components import Components
from tests.support.boot import sidecar_config
from tests.support.writes import gateway

DIM = 4
DAY = 86_400_000
NOW = 1_800_000_000_000


def rec(rid: str, user: str = "alice", **extra: Any) -> MemoryRecord:
    values: dict[str, Any] = {
        "importance": 0.5,
        "created_at": NOW - 10 * DAY,
        "updated_at": NOW - 10 * DAY,
    }
    values.update(extra)
    return MemoryRecord(
        id=rid,
        user_id=user,
        content=f"memory {rid}",
        embedding=(1.0, 0.0, 0.0, 0.0),
        **values,
    )


@dataclass
class Harness:
    """One test's view of the module's store: its own users and ids (``prefix``), its
    own cache and metrics."""

    store: MemoryStore
    cache: CorpusCache
    metrics: Metrics
    locks: KeyedLocks
    prefix: str

    def u(self, user: str) -> str:
        return self.prefix + user

    def rec(self, rid: str, user: str = "alice", **extra: Any) -> MemoryRecord:
        return rec(self.prefix + rid, self.u(user), **extra)

    def bare(self, rid: str) -> str:
        return rid.removeprefix(self.prefix)

    def retention(self, **config: Any) -> Retention:
        return Retention(
            self.store,
            gateway(self.store, self.cache, locks=self.locks),
            RetentionConfig(**config),
            self.metrics,
            clock=lambda: NOW,
        )

    def tracker(self, **config: Any) -> AccessTracker:
        return AccessTracker(
            self.store,
            self.cache,
            RetentionConfig(**config),
            self.metrics,
            clock=lambda: NOW,
        )

    async def rows(self, owner: str, status: Status | None = Status.ACTIVE) -> list[MemoryRecord]:
        return await self.store.query(
            build_filter(owner=self.u(owner), status=status), limit=1000, with_vectors=True
        )

    async def ids(self, owner: str, status: Status | None = Status.ACTIVE) -> set[str]:
        return {self.bare(r.id) for r in await self.rows(owner, status)}

    async def corpus_ids(self, owner: str) -> set[str]:
        corpus = await self.cache.corpus(Scope(self.u(owner)))
        return {self.bare(r.id) for r in corpus.records}


@pytest.fixture(scope="module")
async def shared_store(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MemoryStore]:
    path = tmp_path_factory.mktemp("retention") / "r.db"
    store = await MemoryStore.open(StoreConfig(uri=str(path)), DIM, Metrics())
    yield store
    await store.close()


@pytest.fixture
async def harness(
    shared_store: MemoryStore, request: pytest.FixtureRequest
) -> AsyncIterator[Harness]:
    metrics = Metrics()
    cache = CorpusCache(shared_store, CacheConfig(), metrics)
    # A short prefix per test: ids stay within the schema's 64 bytes (the columnar
    # upsert of access rows checks VARCHAR lengths as a Milvus server does).
    prefix = hashlib.sha256(request.node.name.encode()).hexdigest()[:12] + ":"
    yield Harness(shared_store, cache, metrics, KeyedLocks(), prefix)
    await cache.close()


# -- the score and the order ----------------------------------------------------------


def test_score_grows_with_importance_access_and_recency() -> None:
    config = RetentionConfig()
    base = rec("a")
    assert retention_score(rec("a", importance=0.9), config, NOW) > retention_score(
        base, config, NOW
    )
    assert retention_score(rec("a", access_count=5), config, NOW) > retention_score(
        base, config, NOW
    )
    assert retention_score(rec("a", accessed_at=NOW), config, NOW) > retention_score(
        base, config, NOW
    )
    # one half-life older: the recency term halves
    older = rec("a", updated_at=NOW - 40 * DAY, created_at=NOW - 40 * DAY)
    only_recency = RetentionConfig(importance_weight=0, access_weight=0, recency_weight=1)
    assert retention_score(older, only_recency, NOW) == pytest.approx(
        retention_score(base, only_recency, NOW) / 2
    )
    # log-scaled and capped: the hundredth access counts less than the first
    access_only = RetentionConfig(importance_weight=0, access_weight=1, recency_weight=0)
    scores = [
        retention_score(rec("a", access_count=n), access_only, NOW) for n in (0, 1, 100, 10**6)
    ]
    assert scores[0] == 0
    assert scores[2] == 1
    assert scores[3] == 1
    assert scores[1] > 0.1


def test_constraints_go_last_and_ties_are_deterministic() -> None:
    config = RetentionConfig()
    rows = [
        rec("c-low", memory_type=MemoryType.CONSTRAINT, importance=0.0),
        rec("high", importance=1.0),
        rec("tie-b"),
        rec("tie-a"),
        rec("tie-old", created_at=NOW - 20 * DAY),  # same score (updated_at), older
    ]
    order = [r.id for r in prune_order(rows, config, NOW)]
    assert order == ["tie-old", "tie-a", "tie-b", "high", "c-low"]
    assert [r.id for r in prune_order(list(reversed(rows)), config, NOW)] == order


# -- pruning ----------------------------------------------------------------------------


async def test_prune_archives_the_lowest_scoring_beyond_the_cap(harness: Harness) -> None:
    h = harness
    rows = [
        h.rec("old", updated_at=NOW - 300 * DAY, created_at=NOW - 300 * DAY),
        h.rec("unimportant", importance=0.05),
        h.rec("rule", memory_type=MemoryType.CONSTRAINT, importance=0.0, updated_at=1),
        h.rec("fresh", updated_at=NOW),
        h.rec("used", access_count=40, accessed_at=NOW - DAY),
        h.rec("plain"),
    ]
    others = [h.rec(f"bob-{i}", user="bob") for i in range(8)]
    await h.store.upsert(rows + others)
    assert len(await h.corpus_ids("alice")) == 6
    before_bob = await h.rows("bob")
    originals = {r.id: r for r in await h.rows("alice")}  # as stored (float32)

    retention = h.retention(max_memories_per_user=3)
    assert await retention.prune(h.u("alice")) == 3
    assert await h.ids("alice") == {"rule", "fresh", "used"}
    archived = await h.rows("alice", Status.ARCHIVED)
    assert {h.bare(r.id) for r in archived} == {"old", "unimportant", "plain"}
    for row in archived:  # only the status and updated_at changed
        expected = originals[row.id].with_changes(status=Status.ARCHIVED, updated_at=NOW)
        assert row == expected
        assert row.embedding == expected.embedding
    for row in await h.rows("alice"):
        assert row == originals[row.id]
        assert row.embedding == originals[row.id].embedding
    assert await h.rows("bob") == before_bob  # other users untouched

    assert await h.corpus_ids("alice") == {"rule", "fresh", "used"}  # written through
    assert h.metrics.value("memory_sidecar_pruned_total", {"action": "archive"}) == 3
    assert await retention.prune(h.u("alice")) == 0  # at the cap: nothing more
    assert await h.retention(max_memories_per_user=8).prune(h.u("bob")) == 0
    assert await h.rows("bob") == before_bob


async def test_constraints_are_pruned_only_after_everything_else(harness: Harness) -> None:
    h = harness
    rows = [h.rec(f"rule-{i}", memory_type=MemoryType.CONSTRAINT, importance=0.0) for i in range(3)]
    rows += [h.rec(f"fact-{i}", importance=1.0, access_count=99, accessed_at=NOW) for i in range(3)]
    await h.store.upsert(rows)
    assert await h.retention(max_memories_per_user=2).prune(h.u("alice")) == 4
    # every fact went first, then the constraint with the lowest id (equal scores)
    assert await h.ids("alice") == {"rule-1", "rule-2"}


async def test_delete_action_removes_rows_and_invalidates_the_cache(harness: Harness) -> None:
    h = harness
    await h.store.upsert([h.rec(f"m{i}", importance=i / 10) for i in range(5)])
    assert len(await h.corpus_ids("alice")) == 5
    retention = h.retention(max_memories_per_user=2, action="delete")
    assert await retention.prune(h.u("alice")) == 3
    assert await h.ids("alice", status=None) == {"m3", "m4"}  # gone, not archived
    assert await h.corpus_ids("alice") == {"m3", "m4"}  # reloaded after the invalidation
    assert h.metrics.value("memory_sidecar_pruned_total", {"action": "delete"}) == 3


async def test_tick_checks_noted_owners_bounded_per_tick(harness: Harness) -> None:
    h = harness
    for user in ("u1", "u2", "u3"):
        await h.store.upsert([h.rec(f"{user}-{i}", user=user) for i in range(4)])
    retention = h.retention(max_memories_per_user=2, max_owners_per_tick=2)
    for user in ("u1", "u2", "u2", "u3"):
        retention.note(h.u(user))
    assert await retention.tick() == 4  # u2 (most writes), then u1 (by name)
    assert retention.pending == {h.u("u3"): 1}
    assert len(await h.ids("u3")) == 4
    assert await retention.tick() == 2
    assert retention.pending == {}
    assert await retention.tick() == 0
    assert h.retention(max_memories_per_user=2, prune_interval_s=0).pending == {}


async def test_a_failed_check_is_retried_at_the_next_tick(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness
    await h.store.upsert([h.rec(f"m{i}") for i in range(4)])
    retention = h.retention(max_memories_per_user=2)
    retention.note(h.u("alice"))

    async def down(where: Any) -> int:
        raise StoreError("down")

    with monkeypatch.context() as patch:
        patch.setattr(h.store, "count", down)
        assert await retention.tick() == 0
    assert retention.pending == {h.u("alice"): 1}
    assert await retention.tick() == 2


# -- access tracking ---------------------------------------------------------------------


async def test_access_flush_counts_and_changes_the_order(harness: Harness) -> None:
    h = harness
    await h.store.upsert([h.rec("a"), h.rec("b"), h.rec("c"), h.rec("bob-1", user="bob")])
    originals = {r.id: r for r in await h.rows("alice") + await h.rows("bob")}
    corpus = await h.cache.corpus(Scope(h.u("alice")))
    hit = {h.bare(r.id): Hit(r, 0.9) for r in corpus.records}
    shared = Hit(originals[h.prefix + "bob-1"], 0.5)  # e.g. a memory bob shares
    tracker = h.tracker()
    for _ in range(3):
        tracker.record([hit["a"], hit["c"], shared])
    tracker.record([hit["a"]])
    assert tracker.pending == 3
    assert await tracker.flush() == 3
    assert tracker.pending == 0

    stored = {h.bare(r.id): r for r in await h.rows("alice") + await h.rows("bob")}
    assert (stored["a"].access_count, stored["a"].accessed_at) == (4, NOW)
    assert (stored["c"].access_count, stored["bob-1"].access_count) == (3, 3)
    assert (stored["b"].access_count, stored["b"].accessed_at) == (0, 0)
    for row in stored.values():  # nothing but the access fields changed
        original = originals[row.id]
        assert row.updated_at == original.updated_at
        assert row.with_changes(access_count=0, accessed_at=0) == original
        assert row.embedding == original.embedding
    cached = await h.cache.corpus(Scope(h.u("alice")))  # written through
    assert cached.records[cached.index_of[h.prefix + "a"]].access_count == 4

    # Rows equal but for their accesses: the accessed ones are kept.
    assert await h.retention(max_memories_per_user=2).prune(h.u("alice")) == 1
    assert await h.ids("alice") == {"a", "c"}

    tracker.record([hit["a"]])
    assert await tracker.flush() == 1
    assert stored["a"].access_count + 1 == (await h.rows("alice"))[0].access_count


async def test_a_flush_in_batches_across_owners_counts_each_access_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sidecar.memory.write.access.FLUSH_BATCH", 2)
    monkeypatch.setattr("sidecar.memory.write.access.CACHE_SLICE", 1)  # a yield after each unit
    h = harness
    rows = [h.rec(f"a{i}") for i in range(3)] + [h.rec(f"b{i}", user="bob") for i in range(2)]
    await h.store.upsert(rows)
    scopes = [Scope(h.u("alice")), Scope(h.u("bob"))]
    for scope in scopes:
        await h.cache.corpus(scope)
    tracker = h.tracker()
    tracker.record([Hit(r, 0.9) for r in rows])
    tracker.record([Hit(rows[0], 0.9), Hit(rows[4], 0.9)])
    assert await tracker.flush() == 5
    expected = {"a0": 2, "a1": 1, "a2": 1, "b0": 1, "b1": 2}
    counts = {h.bare(r.id): r.access_count for r in await h.rows("alice") + await h.rows("bob")}
    assert counts == expected
    cached = [r for scope in scopes for r in (await h.cache.corpus(scope)).records]
    assert {h.bare(r.id): r.access_count for r in cached} == expected
    assert h.metrics.value("memory_sidecar_access_updates_total", {"outcome": "flushed"}) == 5


async def test_a_flush_rewrites_no_memory_row_and_keeps_newer_content(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness
    await h.store.upsert([h.rec("a")])
    corpus = await h.cache.corpus(Scope(h.u("alice")))
    tracker = h.tracker()
    tracker.record([Hit(corpus.records[0], 0.9)])
    # The memory changes after it was injected (the writer's update, written through).
    changed = corpus.records[0].with_changes(content="changed", updated_at=NOW + 1)
    await h.store.upsert([changed])
    h.cache.apply([changed])

    async def no_memory_writes(records: Any) -> None:
        raise AssertionError("a flush wrote memory rows")

    monkeypatch.setattr(h.store, "upsert", no_memory_writes)
    assert await tracker.flush() == 1
    cached = (await h.cache.corpus(Scope(h.u("alice")))).records
    assert [(r.content, r.access_count, r.accessed_at) for r in cached] == [("changed", 1, NOW)]
    stored = await h.rows("alice")
    assert [(r.content, r.access_count, r.accessed_at) for r in stored] == [("changed", 1, NOW)]


async def test_a_shared_memory_flushed_is_counted_in_every_unit_that_holds_it(
    harness: Harness,
) -> None:
    h = harness
    group = h.u("team")
    shared = h.rec("shared", user="bob", visibility=Visibility.GROUP, group_id=group)
    await h.store.upsert([shared, h.rec("own")])
    alice = Scope(h.u("alice"), (group,))
    corpus = await h.cache.corpus(alice)
    bobs = await h.cache.corpus(Scope(h.u("bob")))  # bob's own unit holds it too
    assert len(bobs.records) == 1
    tracker = h.tracker()
    tracker.record([Hit(r, 0.9) for r in corpus.records if r.id == shared.id])
    assert await tracker.flush() == 1
    for scope in (alice, Scope(h.u("bob"))):
        counts = {h.bare(r.id): r.access_count for r in (await h.cache.corpus(scope)).records}
        assert counts["shared"] == 1
    assert {h.bare(r.id): r.access_count for r in await h.rows("bob")} == {"shared": 1}


async def test_counts_land_on_their_rows_after_the_unit_changed_between_flushes(
    harness: Harness,
) -> None:
    """The cache finds flushed rows by position: a write that removes and adds rows
    between two flushes must not send a count to the wrong row."""
    h = harness
    await h.store.upsert([h.rec("a"), h.rec("b")])
    scope = Scope(h.u("alice"))
    tracker = h.tracker()
    tracker.record(
        [Hit(r, 0.9) for r in (await h.cache.corpus(scope)).records if h.bare(r.id) == "b"]
    )
    assert await tracker.flush() == 1
    gone = next(r for r in await h.rows("alice") if h.bare(r.id) == "a")
    newer = h.rec("c")
    await h.store.upsert([newer])
    h.cache.apply([gone.with_changes(status=Status.SUPERSEDED, updated_at=NOW + 1), newer])
    cached = (await h.cache.corpus(scope)).records
    assert sorted(h.bare(r.id) for r in cached) == ["b", "c"]
    tracker.record([Hit(r, 0.9) for r in cached])
    assert await tracker.flush() == 2
    counts = {h.bare(r.id): r.access_count for r in (await h.cache.corpus(scope)).records}
    assert counts == {"b": 2, "c": 1}


async def test_a_flush_updates_the_cached_corpus_in_place_of_a_rebuild(
    harness: Harness,
) -> None:
    """Counts change no vector, text or link: the scope's corpus takes the new rows
    and keeps its matrices and structural derived values; values that read counts
    (a ranking) are not kept."""
    h = harness
    await h.store.upsert([h.rec("a"), h.rec("b")])
    scope = Scope(h.u("alice"))
    before = await h.cache.corpus(scope)
    adjacency = before.derived("adjacency", lambda: object(), structural=True)
    ranking = before.derived("ranking", lambda: object())
    tracker = h.tracker()
    tracker.record([Hit(before.records[before.index_of[h.prefix + "a"]], 0.9)])
    assert await tracker.flush() == 1
    after = await h.cache.corpus(scope)
    assert after is not before
    assert after.vectors is before.vectors
    assert after.bm25 is before.bm25
    assert {h.bare(r.id): r.access_count for r in after.records} == {"a": 1, "b": 0}
    assert after.derived("adjacency", lambda: object(), structural=True) is adjacency
    assert after.derived("ranking", lambda: object()) is not ranking
    assert await h.cache.corpus(scope) is after  # current: no rebuild at the next use


async def test_a_corpus_older_than_its_unit_is_rebuilt_not_patched(harness: Harness) -> None:
    """A write since the corpus was built: the flush must not make that corpus look
    current (it would hide the write)."""
    h = harness
    await h.store.upsert([h.rec("a")])
    scope = Scope(h.u("alice"))
    corpus = await h.cache.corpus(scope)
    written = h.rec("b")
    await h.store.upsert([written])
    h.cache.apply([written])  # the unit moves on; the corpus is not rebuilt yet
    tracker = h.tracker()
    tracker.record([Hit(corpus.records[0], 0.9)])
    assert await tracker.flush() == 1
    counts = {h.bare(r.id): r.access_count for r in (await h.cache.corpus(scope)).records}
    assert counts == {"a": 1, "b": 0}


async def test_access_of_a_memory_gone_since_is_not_written(harness: Harness) -> None:
    h = harness
    await h.store.upsert([h.rec("a"), h.rec("b")])
    corpus = await h.cache.corpus(Scope(h.u("alice")))
    tracker = h.tracker()
    tracker.record([Hit(r, 0.9) for r in corpus.records])
    assert await h.retention(max_memories_per_user=1).prune(h.u("alice")) == 1  # "a"
    assert await tracker.flush() == 1
    archived = await h.rows("alice", Status.ARCHIVED)
    assert [(h.bare(r.id), r.access_count) for r in archived] == [("a", 0)]  # not revived
    assert h.metrics.value("memory_sidecar_access_updates_total", {"outcome": "gone"}) == 1


async def test_access_set_is_bounded_and_failed_flushes_are_kept(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness
    await h.store.upsert([h.rec(f"m{i}") for i in range(3)])
    corpus = await h.cache.corpus(Scope(h.u("alice")))
    hits = [Hit(r, 0.9) for r in corpus.records]
    tracker = h.tracker(access_max_pending=2)
    tracker.record(hits)
    assert tracker.pending == 2
    assert h.metrics.value("memory_sidecar_access_updates_total", {"outcome": "dropped"}) == 1

    async def down(records: Any) -> None:
        raise StoreError("down")

    with monkeypatch.context() as patch:
        patch.setattr(h.store, "write_access", down)
        assert await tracker.flush() == 0
    assert tracker.pending == 2  # kept for the next flush
    tracker.record(hits[:1])
    assert await tracker.flush() == 2
    counts = {h.bare(r.id): r.access_count for r in await h.rows("alice")}
    assert counts == {"m0": 2, "m1": 1, "m2": 0}


async def test_the_flush_schedule_runs_in_the_background(harness: Harness) -> None:
    h = harness
    await h.store.upsert([h.rec("a")])
    corpus = await h.cache.corpus(Scope(h.u("alice")))
    tracker = h.tracker(access_flush_s=0.05)
    tracker.start()
    try:
        tracker.record([Hit(corpus.records[0], 0.9)])
        for _ in range(100):
            await asyncio.sleep(0.02)
            if tracker.pending == 0 and (await h.rows("alice"))[0].access_count == 1:
                break
        else:
            raise AssertionError("never flushed")
        tracker.record([Hit(corpus.records[0], 0.9)])
    finally:
        await tracker.stop()  # flushes what is left
    assert (await h.rows("alice"))[0].access_count == 2


async def test_stopping_during_a_scheduled_flush_counts_each_access_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store write finishes in its thread even when its awaiter is cancelled: a
    flush cut short by stop() must not put back (and count again) what it wrote."""
    h = harness
    await h.store.upsert([h.rec("a")])
    corpus = await h.cache.corpus(Scope(h.u("alice")))
    written = asyncio.Event()
    write = h.store.write_access

    async def write_then_linger(stats: Any, *args: Any, **kwargs: Any) -> Any:
        result = await write(stats, *args, **kwargs)
        written.set()
        await asyncio.sleep(0.2)  # written; its awaiter has not resumed yet
        return result

    monkeypatch.setattr(h.store, "write_access", write_then_linger)
    tracker = h.tracker(access_flush_s=0.01)
    tracker.start()
    tracker.record([Hit(corpus.records[0], 0.9)])
    await asyncio.wait_for(written.wait(), 10)
    await tracker.stop()
    assert tracker.pending == 0
    assert (await h.rows("alice"))[0].access_count == 1


async def test_a_flush_cancelled_while_the_cache_takes_its_counts_counts_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache takes the counts once every batch is written, a slice at a time with
    yields between: a cancel there puts nothing back (it would be counted twice)."""
    monkeypatch.setattr("sidecar.memory.write.access.FLUSH_BATCH", 2)
    monkeypatch.setattr("sidecar.memory.write.access.CACHE_SLICE", 1)
    h = harness
    rows = [h.rec(f"a{i}") for i in range(2)] + [h.rec(f"b{i}", user="bob") for i in range(2)]
    await h.store.upsert(rows)
    for owner in ("alice", "bob"):
        await h.cache.corpus(Scope(h.u(owner)))
    tracker = h.tracker()
    tracker.record([Hit(r, 0.9) for r in rows])
    apply = h.cache.apply_access

    def apply_then_cancel(flushed: Any) -> None:
        apply(flushed)
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # lands at the yield after this slice

    monkeypatch.setattr(h.cache, "apply_access", apply_then_cancel)
    with pytest.raises(asyncio.CancelledError):
        await tracker.flush()
    assert tracker.pending == 0  # both batches were written
    monkeypatch.setattr(h.cache, "apply_access", apply)
    assert await tracker.flush() == 0
    counts = {h.bare(r.id): r.access_count for r in await h.rows("alice") + await h.rows("bob")}
    assert counts == {"a0": 1, "a1": 1, "b0": 1, "b1": 1}
    cached = (await h.cache.corpus(Scope(h.u("alice")))).records  # the slice it took
    assert {h.bare(r.id): r.access_count for r in cached} == {"a0": 1, "a1": 1}


# -- the write path feeds the schedule -----------------------------------------------------


async def test_scheduled_pruning_of_owners_the_writer_wrote_for(
    tmp_path: Path, embedder: Embedder
) -> None:
    config = sidecar_config(
        tmp_path,
        hierarchy={"schedule_s": 0},
        retention={"max_memories_per_user": 3, "prune_interval_s": 0.05},
    )
    components = await Components.build(config, embedder=embedder)
    retention = components.retention
    assert retention is not None
    try:
        texts = [
            "I have a dog named Rex.",
            "Always answer in German.",
            "I play the cello.",
            "I am allergic to peanuts.",
            "I drive a blue Volvo.",
        ]
        for at, text in enumerate(texts):
            turn = Turn(user_id="w", user_text=text, assistant_text="Ok.", created_at=NOW + at)
            await components.writer.write_turn(turn)
        assert retention.pending == {"w": 5}
        retention.start()
        for _ in range(200):
            await asyncio.sleep(0.02)
            if components.metrics.value("memory_sidecar_pruned_total", {"action": "archive"}):
                break
        active = await components.store.query(build_filter(owner="w"))
        assert len(active) == 3
        assert any(r.memory_type == MemoryType.CONSTRAINT for r in active)
        # the two oldest non-constraint facts went (same importance and access)
        assert {r.content for r in active} == {
            "User wants the assistant to always answer in German.",
            "User is allergic to peanuts.",
            "User drives a blue Volvo.",
        }
        assert retention.pending == {}
    finally:
        await components.close()
