"""Retrieval access tracking against a real store: flushed counts that change the
prune order, batches across owners and shared memories counted once, the cached
corpus updated in place, the bound, failures, the schedule and cancellation —
and nothing but the access fields changes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sidecar.errors import StoreError
from sidecar.memory.records.records import Hit, Scope, Status, Visibility
from tests.memory.write.retention_support import NOW, Harness

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
    monkeypatch.setattr("sidecar.memory.write.upkeep.access.FLUSH_BATCH", 2)
    monkeypatch.setattr(
        "sidecar.memory.write.upkeep.access.CACHE_SLICE", 1
    )  # a yield after each unit
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
    assert after._matrix is before._matrix
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
    monkeypatch.setattr("sidecar.memory.write.upkeep.access.FLUSH_BATCH", 2)
    monkeypatch.setattr("sidecar.memory.write.upkeep.access.CACHE_SLICE", 1)
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
