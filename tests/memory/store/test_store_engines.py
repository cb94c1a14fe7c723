"""The store contract on both engines: a milvus-lite file and a real Milvus server
(2.3.5, from the ``milvus`` wheel; ``e2e/milvus_server.py``).

Every test runs once per engine, each in collections of its own: schema creation and
checks, capabilities, upsert and replace, scan paging, filtered search (owner,
visibility, status), read-your-writes right after an upsert under the server's
default Bounded consistency, supersession and tombstones, access counts, bulk
upserts, the partition key and HNSW on the server, and the copy a migration makes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from e2e.milvus_server import MilvusServer
from sidecar.config import StoreConfig, config_from_mapping
from sidecar.errors import SchemaMismatch, StoreError
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import (
    AccessStat,
    MemoryRecord,
    Scope,
    Status,
    Visibility,
)
from sidecar.memory.store.capabilities import parse_version
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.store.tombstones import purge, tombstone
from sidecar.metrics import Metrics
from sidecar.runtime.components import Components

DIM = 8
_names = itertools.count()


def record(
    i: int,
    user: str = "u1",
    *,
    visibility: Visibility = Visibility.USER,
    group: str = "",
    status: Status = Status.ACTIVE,
) -> MemoryRecord:
    vector = tuple(1.0 if j == i % DIM else 0.1 for j in range(DIM))
    return MemoryRecord(
        id=f"m{i}",
        user_id=user,
        content=f"fact number {i} about tea",
        embedding=vector,
        visibility=visibility,
        group_id=group,
        status=status,
        created_at=1_000 + i,
        updated_at=1_000 + i,
    )


@pytest.fixture(params=["milvus-lite", "milvus-server"])
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def config(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> StoreConfig:
    """A fresh collection on the engine under test."""
    collection = f"t{next(_names)}_{abs(hash(request.node.nodeid)) % 10**8}"
    if engine == "milvus-lite":
        return StoreConfig(uri=str(tmp_path / "lite.db"), collection=collection)
    server: MilvusServer = request.getfixturevalue("milvus_server")
    return StoreConfig(uri=server.uri, collection=collection, timeout_s=30)


@pytest.fixture
async def store(config: StoreConfig) -> AsyncIterator[MemoryStore]:
    opened = await MemoryStore.open(config, DIM, Metrics())
    yield opened
    await opened.close()


def ids(rows: Iterator[MemoryRecord] | list[MemoryRecord]) -> set[str]:
    return {r.id for r in rows}


async def test_capabilities_are_detected_and_reported(
    store: MemoryStore, engine: str, request: pytest.FixtureRequest
) -> None:
    found = store.capabilities
    if engine == "milvus-lite":
        assert (found.engine, found.full_text, store.full_text) == ("milvus-lite", True, True)
        return
    server: MilvusServer = request.getfixturevalue("milvus_server")
    assert found.engine == "milvus"
    assert found.version == parse_version(server.version)
    # 2.3 has no BM25 function: the collection is made without it, the product's
    # own BM25 serves retrieval, and Milvus' full-text search says what it needs.
    assert found.full_text is (found.version >= (2, 5, 0))
    assert store.full_text is found.full_text
    if not store.full_text:
        with pytest.raises(StoreError, match=r"Milvus 2\.5\.0 or newer"):
            await store.search_text("tea", where=build_filter(owner="u1"), limit=3)


async def test_reopening_checks_the_schema_and_a_foreign_collection_is_refused(
    config: StoreConfig,
) -> None:
    first = await MemoryStore.open(config, DIM, Metrics())
    await first.upsert([record(1)])
    await first.close()
    again = await MemoryStore.open(config, DIM, Metrics())
    try:
        assert ids(await again.query(build_filter(owner="u1"), strong=True)) == {"m1"}
    finally:
        await again.close()
    with pytest.raises(SchemaMismatch, match="dim 8, the model gives 16"):
        await MemoryStore.open(config, 16, Metrics())


async def test_upsert_replaces_and_reads_its_own_writes(store: MemoryStore) -> None:
    """What the write path relies on: a row upserted is read back at once (dedup
    right after a write), under a server's default Bounded consistency."""
    where = build_filter(owner="u1")
    for n in range(5):
        await store.upsert([record(n)])
        assert ids(await store.query(where, strong=True)) == {f"m{i}" for i in range(n + 1)}
        hits = await store.search(record(n).embedding or (), where=where, limit=1, strong=True)
        assert hits[0].record.id == f"m{n}"
    await store.upsert([record(2).with_changes(content="changed")])
    rows = await store.scan(where, strong=True, with_vectors=True)
    assert len(rows) == 5
    assert next(r for r in rows if r.id == "m2").content == "changed"
    assert all(r.embedding is not None and len(r.embedding) == DIM for r in rows)


async def test_scan_pages_past_the_query_window_and_bulk_upserts(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sidecar.memory.store.milvus.QUERY_WINDOW", 500)  # force the iterator
    await asyncio.gather(*(store.upsert([record(i) for i in range(s, s + 400)]) for s in (0, 400)))
    await store.upsert([record(i) for i in range(800, 1300)])
    where = build_filter(owner="u1")
    rows = await store.scan(where, batch_size=300, strong=True)
    assert ids(rows) == {f"m{i}" for i in range(1300)}
    assert await store.count(where) == 1300


async def test_filters_keep_owners_groups_and_statuses_apart(store: MemoryStore) -> None:
    await store.upsert(
        [
            record(1, "ann"),
            record(2, "ann", visibility=Visibility.GROUP, group="team"),
            record(3, "ann", visibility=Visibility.PUBLIC),
            record(4, "bob"),
            record(5, "ann", status=Status.SUPERSEDED),
            record(6, "cat", visibility=Visibility.GROUP, group="other"),
        ]
    )
    await store.flush()
    vector = record(1).embedding or ()

    async def seen(scope: Scope) -> set[str]:
        where = build_filter(scope=scope)
        hits = await store.search(vector, where=where, limit=10, strong=True)
        assert ids(h.record for h in hits) == ids(await store.query(where, strong=True))
        return ids(h.record for h in hits)

    assert await seen(Scope("ann")) == {"m1", "m2", "m3"}
    assert await seen(Scope("bob")) == {"m3", "m4"}
    assert await seen(Scope("bob", ("team",))) == {"m2", "m3", "m4"}
    assert await seen(Scope("eve")) == {"m3"}
    history = build_filter(owner="ann", status=None)
    assert ids(await store.query(history, strong=True)) == {"m1", "m2", "m3", "m5"}


async def test_supersession_tombstones_and_purge(store: MemoryStore) -> None:
    old, new = record(1), record(2)
    await store.upsert([old])
    await store.upsert(
        [new, old.with_changes(status=Status.SUPERSEDED, superseded_by=new.id, updated_at=2_000)]
    )
    where = build_filter(owner="u1")
    assert ids(await store.query(where, strong=True)) == {"m2"}
    [kept] = await store.query(build_filter(owner="u1", status=Status.SUPERSEDED), strong=True)
    assert kept.superseded_by == "m2"
    await store.upsert([tombstone(new, DIM, now=3_000)])
    assert ids(await store.query(build_filter(owner="u1", status=None), strong=True)) == {"m1"}
    graves = await store.query(
        build_filter(owner="u1", status=Status.DELETED, deleted=True), strong=True
    )
    assert [(g.id, g.content) for g in graves] == [("m2", "")]
    assert await purge(store, older_than_ms=-10_000) == 1
    everything = build_filter(owner="u1", node_type=None, status=None, deleted=True)
    assert ids(await store.query(everything, strong=True)) == {"m1"}


async def test_access_counts_are_merged_into_reads(store: MemoryStore) -> None:
    await store.upsert([record(1), record(2)])
    await store.write_access([AccessStat("m1", "u1", 3, 100), AccessStat("m2", "u1", 7, 200)])
    rows = await store.query(build_filter(owner="u1"), strong=True)
    assert {r.id: (r.access_count, r.accessed_at) for r in rows} == {
        "m1": (3, 100),
        "m2": (7, 200),
    }
    assert set(await store.read_access(["m1", "m2", "m3"])) == {"m1", "m2"}


async def test_a_migration_reads_the_collection_back(
    store: MemoryStore, config: StoreConfig
) -> None:
    await store.upsert([record(i) for i in range(20)])
    await store.flush()
    tag, rows = await MemoryStore.read_collection(config, config.collection, Metrics())
    assert tag.startswith("memory-sidecar")
    assert ids(rows) == {f"m{i}" for i in range(20)}
    assert all(r.embedding is not None for r in rows)


async def test_server_partition_key_and_hnsw(
    engine: str, config: StoreConfig, request: pytest.FixtureRequest
) -> None:
    if engine == "milvus-lite":
        with pytest.raises(ValueError, match="partition_key needs a Milvus server"):
            StoreConfig(uri=config.uri, partition_key=True)
        return
    server: MilvusServer = request.getfixturevalue("milvus_server")
    keyed = config.model_copy(update={"partition_key": True})
    if parse_version(server.version) < (2, 4, 0):
        # Its upserts put partition-keyed rows where a filter on the owner never
        # looks: refused at start, naming the version that works.
        with pytest.raises(StoreError, match=r"partition_key needs Milvus 2\.4\.0"):
            await MemoryStore.open(keyed, DIM, Metrics())
        keyed = config.model_copy(update={"partition_key": False})
    store = await MemoryStore.open(keyed.model_copy(update={"index": "HNSW"}), DIM, Metrics())
    try:
        await store.upsert([record(i, f"user{i % 4}") for i in range(40)])
        await store.upsert([record(i, f"user{i % 4}") for i in range(0, 40, 2)])  # again
        for owner in ("user0", "user3"):
            where = build_filter(owner=owner)
            hits = await store.search(record(0).embedding or (), where=where, limit=20, strong=True)
            assert {h.record.user_id for h in hits} == {owner}
            assert len(hits) == 10
    finally:
        await store.close()


async def test_a_profile_needing_milvus_bm25_is_refused_where_the_store_has_none(
    config: StoreConfig, tmp_path: Path, embedder: Embedder
) -> None:
    document = {
        "store": {"uri": config.uri, "collection": config.collection},
        "admin": {"enabled": False},
        "write_queue": {"journal_path": str(tmp_path / "journal.sqlite3")},
        "defaults": {"retrieval": {"strategy": "bm25-milvus"}},
    }
    probe = await MemoryStore.open(config, embedder.dim, Metrics())
    full_text = probe.full_text
    await probe.close()
    if full_text:
        components = await Components.build(
            config_from_mapping(document, env={}), embedder=embedder
        )
        await components.close()
        return
    with pytest.raises(StoreError, match="profiles default use the bm25-milvus strategy"):
        await Components.build(config_from_mapping(document, env={}), embedder=embedder)
