"""The corpus cache against a real store: visibility units, write-through, the
request path's no-wait lookups, and stale snapshots refreshed in the background."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from sidecar.config import CacheConfig, StoreConfig
from sidecar.memory.corpus.cache import CLOCK_SKEW_MS, CorpusCache
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.records.records import MemoryRecord, Scope, Status, Visibility, now_ms
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics

DIM = 4


def rec(rid: str, user: str, **extra: object) -> MemoryRecord:
    return MemoryRecord(
        id=rid,
        user_id=user,
        content=f"text {rid}",
        embedding=(1.0, 0.0, 0.0, 0.0),
        **extra,  # type: ignore[arg-type]
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MemoryStore]:
    opened = await MemoryStore.open(StoreConfig(uri=str(tmp_path / "c.db")), DIM, Metrics())
    await opened.upsert(
        [
            rec("own", "alice"),
            rec("bob-private", "bob"),
            rec("team-shared", "bob", group_id="team", visibility=Visibility.GROUP),
            rec("team-private", "bob", group_id="team", visibility=Visibility.USER),
            rec("everyone", "carol", visibility=Visibility.PUBLIC),
        ]
    )
    yield opened
    await opened.close()


async def test_corpus_is_exactly_what_the_scope_may_read(store: MemoryStore) -> None:
    cache = CorpusCache(store, CacheConfig(), Metrics())
    alone = await cache.corpus(Scope("alice"))
    assert {r.id for r in alone.records} == {"own", "everyone"}
    member = await cache.corpus(Scope("alice", ("team",)))
    assert {r.id for r in member.records} == {"own", "everyone", "team-shared"}
    owner = await cache.corpus(Scope("bob"))
    assert {r.id for r in owner.records} == {
        "bob-private",
        "team-shared",
        "team-private",
        "everyone",
    }


async def test_writes_are_visible_at_once_and_only_to_their_readers(store: MemoryStore) -> None:
    cache = CorpusCache(store, CacheConfig(), Metrics())
    await cache.corpus(Scope("alice"))
    await cache.corpus(Scope("dave", ("team",)))
    fresh = rec("new-shared", "alice", group_id="team", visibility=Visibility.GROUP)
    await store.upsert([fresh])
    cache.apply([fresh])
    assert "new-shared" in (await cache.corpus(Scope("alice"))).index_of
    assert "new-shared" in (await cache.corpus(Scope("dave", ("team",)))).index_of
    assert "new-shared" not in (await cache.corpus(Scope("dave"))).index_of
    nowait = cache.corpus_nowait(Scope("alice"))
    assert nowait is not None
    assert "new-shared" in nowait.index_of


async def test_nowait_loads_in_the_background(store: MemoryStore) -> None:
    metrics = Metrics()
    cache = CorpusCache(store, CacheConfig(), metrics)
    assert cache.corpus_nowait(Scope("alice")) is None
    for _ in range(100):
        await asyncio.sleep(0.02)
        found = cache.corpus_nowait(Scope("alice"))
        if found is not None:
            break
    assert found is not None
    assert {r.id for r in found.records} == {"own", "everyone"}
    await cache.close()


async def test_stale_snapshot_is_served_while_it_refreshes(store: MemoryStore) -> None:
    # A unit due for its full reload: the request path gets the snapshot it has.
    cache = CorpusCache(store, CacheConfig(ttl_s=3600, full_reload_s=0.05), Metrics())
    await cache.corpus(Scope("alice"))
    await store.upsert([rec("from-another-replica", "alice")])
    await asyncio.sleep(0.06)
    stale = cache.corpus_nowait(Scope("alice"))
    assert stale is not None
    assert "from-another-replica" not in stale.index_of
    fresh = await cache.corpus(Scope("alice"))
    assert "from-another-replica" in fresh.index_of
    await cache.close()


async def test_concurrent_loads_share_one_store_query(store: MemoryStore) -> None:
    metrics = Metrics()
    cache = CorpusCache(store, CacheConfig(), metrics)
    await asyncio.gather(*(cache.corpus(Scope("alice")) for _ in range(10)))
    loads = metrics.value("memory_sidecar_corpus_cache_lookups_total", {"outcome": "load"})
    assert loads == 2  # "user:alice" and "public", once each


async def test_a_scopes_units_load_side_by_side_and_outlive_a_caller_that_gives_up(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user in many groups waits for the slowest unit, not for the sum; a request
    cancelled at its deadline leaves the loads to finish for the next one."""
    cache = CorpusCache(store, CacheConfig(), Metrics())
    scan = store.scan
    running: list[int] = [0, 0]  # now, most at once

    async def slow_scan(*args: object, **kwargs: object) -> object:
        running[0] += 1
        running[1] = max(running)
        try:
            await asyncio.sleep(0.05)
            return await scan(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            running[0] -= 1

    monkeypatch.setattr(store, "scan", slow_scan)
    scope = Scope("alice", ("team", "a", "b", "c"))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(cache.corpus(scope), 0.02)
    assert running[1] == 6  # the user, public and four groups, all at once
    await asyncio.sleep(0.3)
    assert cache.corpus_nowait(scope) is not None  # loaded though nobody waited
    assert "team-shared" in (await cache.corpus(scope)).index_of
    await cache.close()


async def test_ttl_refresh_is_a_delta_that_also_drops_superseded_rows(
    store: MemoryStore,
) -> None:
    metrics = Metrics()
    cache = CorpusCache(store, CacheConfig(ttl_s=0.05), metrics)
    await cache.corpus(Scope("alice"))
    # Another replica adds one memory and supersedes another (newer updated_at).
    await store.upsert(
        [
            rec("replica-new", "alice", updated_at=now_ms()),
            rec("own", "alice", updated_at=now_ms(), status=Status.SUPERSEDED),
        ]
    )
    await asyncio.sleep(0.25)
    fresh = await cache.corpus(Scope("alice"))
    assert "replica-new" in fresh.index_of
    assert "own" not in fresh.index_of
    assert metrics.value("memory_sidecar_corpus_cache_lookups_total", {"outcome": "delta"}) >= 1
    await cache.close()


async def test_current_reads_the_owners_rows_written_elsewhere_at_once(
    store: MemoryStore,
) -> None:
    metrics = Metrics()
    cache = CorpusCache(store, CacheConfig(ttl_s=3600), metrics)  # no refresh due
    await cache.corpus(Scope("alice"))
    await store.upsert([rec("alice-newer", "alice", updated_at=now_ms())])
    assert "alice-newer" in (await cache.current(Scope("alice"))).index_of
    # Another worker stores a row of a turn accepted long ago: its updated_at (the
    # turn's time) is older than rows the cache already holds.
    await store.upsert([rec("other-worker", "alice", updated_at=1_000)])
    assert "other-worker" not in (await cache.corpus(Scope("alice"))).index_of  # snapshot
    fresh = await cache.current(Scope("alice"))
    assert {"other-worker", "alice-newer"} <= set(fresh.index_of)
    assert metrics.value("memory_sidecar_corpus_cache_lookups_total", {"outcome": "delta"}) == 2
    assert metrics.value("memory_sidecar_corpus_cache_lookups_total", {"outcome": "load"}) >= 1
    await cache.close()


async def test_current_drops_rows_deleted_outright_elsewhere(store: MemoryStore) -> None:
    """A row another process deleted outright (a purged tombstone, an older version's
    delete) is not judged against by this writer any more."""
    cache = CorpusCache(store, CacheConfig(ttl_s=3600), Metrics())
    assert "own" in (await cache.corpus(Scope("alice"))).index_of
    await store.delete(build_filter(owner="alice", ids=["own"]))
    assert "own" in (await cache.corpus(Scope("alice"))).index_of  # the snapshot
    assert "own" not in (await cache.current(Scope("alice"))).index_of
    await cache.close()


async def test_one_refresh_query_serves_every_cached_user(store: MemoryStore) -> None:
    metrics = Metrics()
    cache = CorpusCache(store, CacheConfig(ttl_s=3600), metrics)
    for user in ("alice", "bob", "dave"):
        await cache.corpus(Scope(user, ("team",)))
    loads = metrics.value("memory_sidecar_corpus_cache_lookups_total", {"outcome": "load"})
    # Another replica writes for two of them (and for someone not cached).
    await store.upsert(
        [
            rec("alice-new", "alice", updated_at=now_ms()),
            rec("bob-new", "bob", updated_at=now_ms()),
            rec("team-new", "carol", group_id="team", visibility=Visibility.GROUP,
                updated_at=now_ms()),
            rec("erin-new", "erin", updated_at=now_ms()),
        ]
    )  # fmt: skip
    # One query for the rows written since the units were loaded (all users); only
    # rows a cached unit needs are fetched with their vectors (not erin's).
    assert await cache.refresh() == 3
    assert metrics.value("memory_sidecar_corpus_cache_lookups_total", {"outcome": "delta"}) == 1
    alice = cache.corpus_nowait(Scope("alice", ("team",)))
    bob = cache.corpus_nowait(Scope("bob"))
    assert alice is not None
    assert bob is not None
    assert {"alice-new", "team-new"} <= set(alice.index_of)
    assert "bob-new" in bob.index_of
    assert "erin-new" not in alice.index_of
    assert "bob-new" not in alice.index_of
    # Nothing was loaded unit by unit.
    assert metrics.value("memory_sidecar_corpus_cache_lookups_total", {"outcome": "load"}) == loads
    # The next refresh starts where this one began (less the clock-skew allowance).
    await store.upsert([rec("alice-later", "alice", updated_at=now_ms())])
    assert await cache.refresh() == 1  # the others are held in that version already
    later = cache.corpus_nowait(Scope("alice"))
    assert later is not None
    assert "alice-later" in later.index_of
    # Rows read again unchanged (e.g. this process's own writes) cost no vectors and
    # rebuild nothing.
    assert await cache.refresh() == 0
    assert cache.corpus_nowait(Scope("alice")) is later
    # Rows older than the allowance are not read again.
    old = now_ms() - 10 * CLOCK_SKEW_MS
    await store.upsert([rec("ancient", "alice", updated_at=old)])
    assert await cache.refresh() == 0
    await cache.close()


async def test_scalar_only_updates_reuse_the_indexes(store: MemoryStore) -> None:
    """An access-count flush re-reads rows (new vector objects, same values): the
    next corpus shows the new counts but reuses the matrices and the BM25 index; a
    content change rebuilds them."""
    cache = CorpusCache(store, CacheConfig(), Metrics())
    before = await cache.corpus(Scope("alice"))
    reread = [r.with_changes(embedding=tuple(r.embedding or ()), access_count=7) for r in
              before.records]  # fmt: skip
    cache.apply(reread)
    counted = await cache.corpus(Scope("alice"))
    assert counted is not before
    assert [r.access_count for r in counted.records] == [7, 7]
    assert counted._matrix is before._matrix
    assert counted.bm25 is before.bm25
    own = next(r for r in counted.records if r.id == "own")
    cache.apply([own.with_changes(content="a new text", embedding=(0.0, 1.0, 0.0, 0.0))])
    edited = await cache.corpus(Scope("alice"))
    assert edited._matrix is not before._matrix
    assert edited.records[edited.index_of["own"]].content == "a new text"
    assert edited.vectors[edited.index_of["own"]].tolist() == [0.0, 1.0, 0.0, 0.0]


def test_appended_memories_extend_the_indexes_exactly_as_a_rebuild() -> None:
    rng = np.random.default_rng(3)
    words = ["tea", "dog", "oslo", "chess", "night", "shift", "ramen", "juniper", "beach"]

    def memory(i: int, *, related: tuple[str, ...] = (), session: str = "") -> MemoryRecord:
        text = " ".join(rng.choice(words, size=int(rng.integers(2, 8))))
        vector = rng.standard_normal(DIM)
        return MemoryRecord(
            id=f"m{i:03d}", user_id="u", content=text, created_at=i, session_id=session,
            embedding=tuple(float(x) for x in vector / np.linalg.norm(vector)),
            related_ids=related,
        )  # fmt: skip

    old_rows = [memory(i, session=f"s{i % 3}") for i in range(30)]
    old = Corpus.build(old_rows, DIM)
    new_rows = [memory(30, related=("m004",), session="s1"), memory(31, session="s9")]
    # A back-link changes an old row's related_ids: still an append.
    back = old_rows[4].with_changes(related_ids=("m030",))
    rows = [*old_rows[:4], back, *old_rows[5:], *new_rows]
    extended = Corpus.build(rows, DIM, old)
    rebuilt = Corpus.build(rows, DIM)
    assert extended.bm25 is not old.bm25
    assert old.bm25.size == 30  # the previous corpus is untouched
    assert np.array_equal(extended.vectors, rebuilt.vectors)
    assert extended.links == rebuilt.links
    assert extended.index_of == rebuilt.index_of
    assert np.array_equal(extended.session_prev, rebuilt.session_prev)
    assert np.array_equal(extended.session_next, rebuilt.session_next)
    for query in (["tea"], ["dog", "oslo", "dog"], ["juniper", "beach", "absent"], []):
        assert np.allclose(extended.bm25.scores(query), rebuilt.bm25.scores(query))
        assert extended.bm25.max_score(query) == pytest.approx(rebuilt.bm25.max_score(query))
    # Not an append (an old memory gone): vectors and tokens reused, same result.
    fewer = [*rows[1:7], *rows[8:]]
    dropped = Corpus.build(fewer, DIM, extended)
    scratch = Corpus.build(fewer, DIM)
    assert np.array_equal(dropped.vectors, scratch.vectors)
    assert dropped.links == scratch.links
    for query in (["tea"], ["dog", "oslo", "dog"], ["juniper", "beach", "absent"]):
        assert np.allclose(dropped.bm25.scores(query), scratch.bm25.scores(query))
