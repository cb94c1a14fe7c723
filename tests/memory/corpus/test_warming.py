"""Snapshots readied before the request that reads them: after a write (one run for
a burst of them), after a load a request found missing, after a compaction's swap;
the snapshot readied is the one served; a change during a run stops it and asks
for another; closing the cache cancels what is due."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from sidecar.config import CacheConfig, StoreConfig
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.records.records import MemoryRecord, Scope, Status
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics

DIM = 4
FAST = CacheConfig(warm_after_ms=20, warm_min_rows=0)


def rec(rid: str, user: str = "alice", **extra: object) -> MemoryRecord:
    return MemoryRecord(
        id=rid,
        user_id=user,
        content=f"text {rid}",
        embedding=(1.0, 0.0, 0.0, 0.0),
        **extra,  # type: ignore[arg-type]
    )


class Preparing:
    """A prepare of two steps that records what it readied, for whom."""

    def __init__(self, between: Callable[[], object] | None = None) -> None:
        self.readied: list[tuple[Corpus, str]] = []
        self.started = 0
        #: Called once, between the first run's steps.
        self.between = between

    def __call__(self, corpus: Corpus, user_id: str) -> Iterator[None]:
        self.started += 1
        corpus.derived("prepared", lambda: True, structural=True)
        yield
        if self.between is not None:
            between, self.between = self.between, None
            between()
        yield
        self.readied.append((corpus, user_id))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MemoryStore]:
    opened = await MemoryStore.open(StoreConfig(uri=str(tmp_path / "w.db")), DIM, Metrics())
    await opened.upsert([rec("own"), rec("bob-own", "bob")])
    yield opened
    await opened.close()


def warmings(metrics: Metrics, outcome: str) -> float:
    return metrics.value("memory_sidecar_corpus_warmings_total", {"outcome": outcome})


async def test_a_burst_of_writes_readies_the_snapshot_the_next_request_reads(
    store: MemoryStore,
) -> None:
    metrics, prepare = Metrics(), Preparing()
    cache = CorpusCache(store, FAST, metrics, prepare=prepare)
    await cache.corpus(Scope("alice"))
    await cache.corpus(Scope("bob"))
    for i in range(3):
        cache.apply([rec(f"new-{i}")])
    await cache.warmings()
    assert len(prepare.readied) == 1  # one run for the burst, none for bob
    readied, user = prepare.readied[0]
    assert user == "alice"
    assert {"new-0", "new-1", "new-2"} <= set(readied.index_of)
    served = cache.corpus_nowait(Scope("alice"))
    assert served is readied  # the request reads what was readied, not a new one
    assert warmings(metrics, "done") == 1
    await cache.close()


async def test_a_scope_a_request_found_cold_is_readied_once_loaded(store: MemoryStore) -> None:
    metrics, prepare = Metrics(), Preparing()
    cache = CorpusCache(store, FAST, metrics, prepare=prepare)
    scope = Scope("alice", ("team",))
    assert cache.corpus_nowait(scope) is None  # loads in the background
    await asyncio.sleep(0.2)
    await cache.warmings()
    assert [user for _, user in prepare.readied] == ["alice"]
    assert cache.corpus_nowait(scope) is prepare.readied[0][0]
    await cache.close()


async def test_a_change_during_a_run_stops_it_and_readies_the_new_snapshot(
    store: MemoryStore,
) -> None:
    metrics = Metrics()
    prepare = Preparing(lambda: cache.apply([rec("first", status=Status.DELETED)]))
    cache = CorpusCache(store, FAST, metrics, prepare=prepare)
    await cache.corpus(Scope("alice"))
    cache.apply([rec("first")])
    await cache.warmings()
    # The run the change stopped; the compaction's swap may stop the next one too.
    assert warmings(metrics, "superseded") >= 1
    # The deletion's fold swaps in a compacted snapshot after the request path's
    # one: readied in turn.
    readied = [corpus for corpus, _ in prepare.readied]
    assert all("first" not in corpus.index_of for corpus in readied)
    await cache.compactions()
    await cache.warmings()
    assert cache.corpus_nowait(Scope("alice")) is prepare.readied[-1][0]
    assert not prepare.readied[-1][0].holds_deleted
    await cache.close()


async def test_no_prepare_no_delay_or_a_small_scope_readies_nothing(store: MemoryStore) -> None:
    prepare = Preparing()
    for cache in (
        CorpusCache(store, FAST, Metrics()),
        CorpusCache(
            store, CacheConfig(warm_after_ms=0, warm_min_rows=0), Metrics(), prepare=prepare
        ),
        CorpusCache(
            store, CacheConfig(warm_after_ms=20, warm_min_rows=3), Metrics(), prepare=prepare
        ),
    ):
        await cache.corpus(Scope("alice"))
        cache.apply([rec("x")])
        await cache.warmings()
        assert cache.corpus_nowait(Scope("alice")) is not None
        await cache.close()
    assert prepare.started == 0  # alice has 2 memories


async def test_closing_cancels_the_runs_due(store: MemoryStore) -> None:
    prepare = Preparing()
    cache = CorpusCache(
        store, CacheConfig(warm_after_ms=10_000, warm_min_rows=0), Metrics(), prepare=prepare
    )
    await cache.corpus(Scope("alice"))
    cache.apply([rec("x")])
    await cache.close()
    await asyncio.sleep(0.05)
    assert prepare.started == 0
