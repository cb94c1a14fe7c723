"""The corpus cache brings a scope's snapshot up to date from the rows a write
changed (issue S, item 1): after writes, supersedes, deletes, access flushes and
rows shared with a group, the snapshot it serves equals one built from all of the
units' rows, and it was made by :meth:`Corpus.updated` wherever one unit's log
reaches back to the snapshot before."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from sidecar.config import CacheConfig, StoreConfig
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.units import unit_keys
from sidecar.memory.records.records import (
    AccessStat,
    MemoryRecord,
    Scope,
    Status,
    Visibility,
    now_ms,
)
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics

DIM = 4
SCOPE = Scope("alice", group_ids=("team",))


def rec(i: int, **changes: object) -> MemoryRecord:
    record = MemoryRecord(
        id=f"m{i}",
        user_id="alice",
        content=f"User note number {i} about tea and oslo.",
        embedding=(1.0, float(i), 0.0, 0.5),
        session_id=f"s{i // 3}",
        created_at=1_000 + 10 * i,
    )
    return record.with_changes(**changes) if changes else record


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MemoryStore]:
    opened = await MemoryStore.open(StoreConfig(uri=str(tmp_path / "d.db")), DIM, Metrics())
    await opened.upsert([rec(i) for i in range(9)])
    yield opened
    await opened.close()


def fresh(cache: CorpusCache) -> Corpus:
    rows = [r for key in unit_keys(SCOPE) if (u := cache._units.get(key)) for r in u.rows]
    return Corpus.build(rows, DIM)


def same(served: Corpus, built: Corpus) -> None:
    assert [r.id for r in served.records] == [r.id for r in built.records]
    assert [r.access_count for r in served.records] == [r.access_count for r in built.records]
    assert dict(served.index_of.items()) == dict(built.index_of.items())
    assert np.array_equal(served.vectors, built.vectors)
    assert np.array_equal(served.session_prev, built.session_prev)
    assert np.array_equal(served.session_next, built.session_next)
    assert served.links == built.links
    for query in (["tea"], ["number", "oslo"]):
        assert np.array_equal(served.bm25.scores(query), built.bm25.scores(query))


async def test_writes_bring_the_snapshot_up_to_date_from_the_changed_rows(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = CorpusCache(store, CacheConfig(), Metrics())
    first = await cache.corpus(SCOPE)
    assert first.size == 9
    updates: list[int] = []
    original = Corpus.updated.__func__  # type: ignore[attr-defined]

    def counted(cls, previous, changes, dim, /, **options):  # type: ignore[no-untyped-def]
        updates.append(len(changes))
        return original(cls, previous, changes, dim, **options)

    monkeypatch.setattr(Corpus, "updated", classmethod(counted))
    steps = [
        [rec(9)],  # a new memory
        [rec(4, status=Status.SUPERSEDED), rec(10, content="User drinks juniper tea now.")],
        [rec(2, status=Status.DELETED)],
        [rec(5, related_ids=("m7",))],  # a back-link
        [rec(11, created_at=1_005, session_id="s0")],  # told late, lands among old rows
        [rec(6, session_id="elsewhere")],
    ]
    for n, rows in enumerate(steps):
        cache.apply(rows)
        same(await cache.corpus(SCOPE), fresh(cache))
        assert len(updates) == n + 1
    cache.apply_access({"user:alice": [AccessStat("m3", "alice", 4, 99_000)]})
    served = await cache.corpus(SCOPE)
    same(served, fresh(cache))
    assert served.records[served.index_of["m3"]].access_count == 4


async def test_a_row_shared_with_a_group_stays_the_users_own_version(
    store: MemoryStore,
) -> None:
    cache = CorpusCache(store, CacheConfig(), Metrics())
    await cache.corpus(SCOPE)
    shared = rec(1, visibility=Visibility.GROUP, group_id="team", content="Team tea.")
    cache.apply([shared])
    served = await cache.corpus(SCOPE)
    same(served, fresh(cache))
    assert served.records[served.index_of["m1"]].content == "Team tea."
    cache.apply([rec(1, status=Status.DELETED)])  # the user's unit drops it
    served = await cache.corpus(SCOPE)
    same(served, fresh(cache))


async def test_a_deleted_memory_leaves_nothing_behind(store: MemoryStore) -> None:
    """A supersede keeps the layers shared with the snapshot before (fast); a
    deletion's snapshot leaves the deleted row out at once, and the compaction run
    right after it folds the shared layers: no vector, posting or memo entry of the
    deleted memory stays in what the cache holds."""
    cache = CorpusCache(store, CacheConfig(), Metrics())
    await cache.corpus(SCOPE)
    cache.apply([rec(9)])
    before = await cache.corpus(SCOPE)
    cache.apply([rec(5, status=Status.SUPERSEDED), rec(10, content="User now drinks coffee.")])
    superseded = await cache.corpus(SCOPE)
    same(superseded, fresh(cache))
    assert superseded._matrix._buffer is before._matrix._buffer  # shared, m5's row dead
    gone = rec(4)
    cache.apply([gone.with_changes(status=Status.DELETED)])
    assert "m4" not in cache._features._memories  # its text left at once
    first = await cache.corpus(SCOPE)
    same(first, fresh(cache))  # the deleted row is out of the snapshot at once
    assert first.holds_deleted  # its vector and postings wait for the compactor
    await cache.compactions()
    served = await cache.corpus(SCOPE)
    assert served is not first
    assert not served.holds_deleted
    same(served, fresh(cache))
    held = served._matrix._buffer.data[: served._matrix._end]
    assert len(held) == served.size
    assert not any(np.array_equal(row, np.asarray(gone.embedding, np.float32)) for row in held)
    assert not any(np.array_equal(row, np.asarray(rec(5).embedding, np.float32)) for row in held)
    assert served.bm25._moved is None  # one table: the removed documents' postings gone
    assert served.bm25._base_size == served.size
    assert "m4" not in served.index_of  # (its id may stay in the index's base: not content)
    assert "m4" not in cache._features._memories


async def test_a_deletion_another_replica_wrote_leaves_nothing_behind(
    store: MemoryStore,
) -> None:
    """A tombstone read by a unit's delta refresh (another replica deleted the
    memory) folds the shared layers too, and its text leaves the memo."""
    cache = CorpusCache(store, CacheConfig(ttl_s=0.001, full_reload_s=3_600), Metrics())
    await cache.corpus(SCOPE)
    await store.upsert([rec(9, updated_at=now_ms())])
    await asyncio.sleep(0.01)
    before = await cache.corpus(SCOPE)  # a delta refresh brought m9 in
    assert before.size == 10
    gone = rec(4)
    await store.upsert([gone.with_changes(status=Status.DELETED, updated_at=now_ms() + 1)])
    await asyncio.sleep(0.01)
    await cache.corpus(SCOPE)
    await cache.compactions()
    served = await cache.corpus(SCOPE)
    same(served, fresh(cache))
    assert "m4" not in served.index_of
    held = served._matrix._buffer.data[: served._matrix._end]
    assert len(held) == served.size
    assert not any(np.array_equal(row, np.asarray(gone.embedding, np.float32)) for row in held)
    assert served.bm25._moved is None
    assert "m4" not in cache._features._memories


async def test_a_snapshot_made_while_its_deletion_compacts_is_compacted_in_turn(
    store: MemoryStore,
) -> None:
    """A write between a deletion's snapshot and its compaction makes a snapshot
    from the one still holding the deleted row: the compaction of the first finds
    it served instead, and compacts it."""
    metrics = Metrics()
    cache = CorpusCache(store, CacheConfig(), metrics)
    await cache.corpus(SCOPE)
    gone = rec(3)
    cache.apply([gone.with_changes(status=Status.DELETED)])
    first = await cache.corpus(SCOPE)  # its compaction starts in a worker thread
    cache.apply([rec(9)])
    second = await cache.corpus(SCOPE)
    assert second is not first
    assert second.holds_deleted  # made from the first: the same shared layers
    await cache.compactions()
    served = await cache.corpus(SCOPE)
    assert not served.holds_deleted
    same(served, fresh(cache))
    held = served._matrix._buffer.data[: served._matrix._end]
    assert not any(np.array_equal(row, np.asarray(gone.embedding, np.float32)) for row in held)
    compactions = metrics.corpus_compactions
    assert compactions.labels(outcome="stale")._value.get() == 1  # the first's
    assert compactions.labels(outcome="swapped")._value.get() == 1  # the second's


async def test_forgetting_a_user_drops_the_snapshots_made_of_their_rows(
    store: MemoryStore,
) -> None:
    """The cached snapshots of a forgotten user's scopes hold their memories' text:
    they go at once, not at the scope's next request."""
    cache = CorpusCache(store, CacheConfig(), Metrics())
    await cache.corpus(SCOPE)
    await cache.corpus(Scope("bob", group_ids=("team",)))
    assert len(cache._snapshots._corpora) == 2
    cache.invalidate_user("alice")
    assert [keys for keys in cache._snapshots._corpora if "user:alice" in keys] == []
    assert len(cache._snapshots._corpora) == 1  # bob's stays


async def test_a_snapshot_in_use_when_its_user_is_forgotten_puts_nothing_back_in_the_memo(
    store: MemoryStore,
) -> None:
    """A snapshot made by an update looks its memories up in the memo when read (and
    keeps what it reads there); one still in use after a forget (a request begun
    before it) reads without adding the forgotten memories back."""
    cache = CorpusCache(store, CacheConfig(), Metrics())
    await cache.corpus(SCOPE)
    cache.apply([rec(9)])
    snapshot = await cache.corpus(SCOPE)
    assert snapshot._features is None  # made by an update: entries looked up
    calls: list[str] = []

    def probe(record: MemoryRecord) -> int:
        calls.append(record.id)
        return len(record.content)

    assert snapshot.read("probe", 2, probe) == snapshot.read("probe", 2, probe)
    assert len(calls) == 1  # kept in the memo
    cache.invalidate_user("alice")
    assert cache._features._memories == {}
    lengths = snapshot.read_all("probe", probe)
    assert lengths == [len(r.content) for r in snapshot.records]
    snapshot.read("other", 0, probe)
    assert cache._features._memories == {}
