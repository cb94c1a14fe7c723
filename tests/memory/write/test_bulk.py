"""The bulk loader's owner lanes: every owner's rows once, and a failure stops the
load with the store's own error (the other lane does not go on writing)."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.config import CacheConfig
from sidecar.errors import StoreError
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.records.records import MemoryRecord, Scope
from sidecar.memory.store.filters import build_filter
from sidecar.memory.write.rows.bulk import bulk_load
from sidecar.metrics import Metrics
from tests.support.fakes import FakeEmbedder, FakeStore
from tests.support.writes import gateway


def records(owners: int, each: int) -> list[MemoryRecord]:
    return [
        MemoryRecord(
            id=f"o{o}-{i}",
            user_id=f"owner-{o}",
            content=f"note {i} of owner {o}",
            embedding=(1.0, float(o), float(i), 0.0),
            created_at=i,
        )
        for o in range(owners)
        for i in range(each)
    ]


async def test_lanes_load_every_owner_once_and_stop_on_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metrics = Metrics()
    embedder, store = FakeEmbedder(4), FakeStore(4)
    cache = CorpusCache(store, CacheConfig(), metrics)
    rows = records(5, 30)
    seen: list[str] = []
    stats = await bulk_load(
        rows,
        embedder=embedder,
        enricher=None,
        writes=gateway(store, cache),
        progress=lambda step, n: seen.append(step),
    )
    assert (stats.memories, stats.rows, stats.owners) == (150, 150, 5)
    assert seen == ["store"] * 5
    assert stats.seconds == stats.wall_seconds > 0
    for o in range(5):
        stored = await store.query(build_filter(owner=f"owner-{o}"), limit=100)
        assert sorted(r.id for r in stored) == sorted(f"o{o}-{i}" for i in range(30))
    assert (await cache.corpus(Scope("owner-3"))).size == 30  # written through
    assert embedder.calls == []  # every row came with its vector
    await cache.close()

    calls: list[str] = []

    async def failing(batch: Any) -> None:
        calls.append(batch[0].user_id)
        raise StoreError("down")

    monkeypatch.setattr(store, "upsert", failing)
    with pytest.raises(StoreError):
        await bulk_load(
            records(6, 2), embedder=embedder, enricher=None, writes=gateway(store, cache)
        )
    assert len(calls) <= 2  # each lane tried once, then the load stopped
