"""The store adapter against a real milvus-lite file: schema creation and checks,
upsert/replace, scan paging."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.config import StoreConfig
from sidecar.errors import SchemaMismatch, StoreError
from sidecar.memory.records.records import AccessStat, MemoryRecord, Origin, Scope, Status
from sidecar.memory.store.connection import connect
from sidecar.memory.store.filters import Filter, build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.store.schema import (
    LEGACY_SCHEMA_TAG,
    collection_fields,
    decode_related,
    encode_related,
)
from sidecar.metrics import Metrics


def record(i: int, user: str = "u1", dim: int = 8) -> MemoryRecord:
    vector = tuple(1.0 if j == i % dim else 0.0 for j in range(dim))
    return MemoryRecord(
        id=f"m{i}", user_id=user, content=f"fact {i}", embedding=vector, created_at=i
    )


async def test_reopening_checks_the_schema(tmp_path: Path) -> None:
    config = StoreConfig(uri=str(tmp_path / "s.db"), collection="mem")
    store = await MemoryStore.open(config, 8, Metrics())
    await store.upsert([record(1)])
    await store.close()

    again = await MemoryStore.open(config, 8, Metrics())
    assert [r.id for r in await again.query(build_filter(owner="u1"))] == ["m1"]
    await again.close()

    with pytest.raises(SchemaMismatch, match="dim 8"):
        await MemoryStore.open(config, 16, Metrics())


@pytest.mark.parametrize(
    ("foreign", "dim", "message"),
    [("mem", 8, "schema tag"), ("mem__access", 2, "access-count collection")],
)
async def test_foreign_collection_is_a_clear_error(
    tmp_path: Path, foreign: str, dim: int, message: str
) -> None:
    from pymilvus import MilvusClient

    path = str(tmp_path / "f.db")
    client = MilvusClient(path)
    client.create_collection(foreign, dimension=dim)
    client.close()
    with pytest.raises(SchemaMismatch, match=message):
        await MemoryStore.open(StoreConfig(uri=path, collection="mem"), 8, Metrics())


async def test_upsert_replaces_and_scan_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sidecar.memory.store.milvus.QUERY_WINDOW", 1000)  # force the iterator
    store = await MemoryStore.open(StoreConfig(uri=str(tmp_path / "p.db")), 8, Metrics())
    try:
        await store.upsert([record(i) for i in range(2500)])
        await store.upsert([record(7).with_changes(content="changed")])
        rows = await store.scan(build_filter(owner="u1"), with_vectors=True, batch_size=300)
        assert len(rows) == 2500
        assert {r.id for r in rows} == {f"m{i}" for i in range(2500)}
        assert next(r for r in rows if r.id == "m7").content == "changed"
        assert all(r.embedding is not None and len(r.embedding) == 8 for r in rows)
        assert await store.count(build_filter(owner="u1")) == 2500
    finally:
        await store.close()


class _LateServer:
    """Stands in for ``pymilvus.MilvusClient`` while a server's socket is not there
    yet: the first ``failures`` connections fail the way pymilvus fails them."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0

    def __call__(self, **kwargs: object) -> str:
        from pymilvus.exceptions import MilvusException

        self.attempts += 1
        if self.attempts <= self.failures:
            raise MilvusException(2, f"Fail connecting to server on {kwargs['uri']}")
        return "client"


def test_connecting_waits_for_a_server_that_is_still_starting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pymilvus

    late = _LateServer(failures=3)
    monkeypatch.setattr(pymilvus, "MilvusClient", late)
    assert connect(StoreConfig(uri="unix:/tmp/starting.sock", timeout_s=5)) == "client"
    assert late.attempts == 4


def test_connecting_gives_up_after_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    import pymilvus

    never = _LateServer(failures=1_000)
    monkeypatch.setattr(pymilvus, "MilvusClient", never)
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot connect to the store"):
        connect(StoreConfig(uri="unix:/tmp/never.sock", timeout_s=0.5))
    assert time.monotonic() - started < 2.0
    assert 2 <= never.attempts <= 5


async def reads_of_a_row_being_upserted(
    store: MemoryStore, reads: int, where: Filter | None = None
) -> tuple[int, int]:
    """(reads that found the row, reads that did not) while another task upserts it
    in a loop; stops early at the first miss."""
    row = record(1)
    await store.upsert([row])
    stop = asyncio.Event()

    async def upsert_forever() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            await store.upsert([row.with_changes(access_count=n)])

    writer = asyncio.create_task(upsert_forever())
    found = missed = 0
    try:
        for _ in range(reads):
            if await store.query(where or build_filter(owner="u1"), limit=10):
                found += 1
            else:
                missed += 1
                break
    finally:
        stop.set()
        await writer
    return found, missed


@pytest.mark.parametrize("reader", ["owner", "scope"])
async def test_reads_never_see_a_row_half_upserted(tmp_path: Path, reader: str) -> None:
    """A read of the owner's rows (the owner's share of the gate) and a read of a
    scope (anyone's rows: every share)."""
    where = build_filter(owner="u1") if reader == "owner" else build_filter(scope=Scope("u1"))
    store = await MemoryStore.open(StoreConfig(uri=str(tmp_path / "g.db")), 8, Metrics())
    try:
        assert await reads_of_a_row_being_upserted(store, 300, where) == (300, 0)
    finally:
        await store.close()


async def test_milvus_lite_without_the_gate_does_show_half_upserted_rows(tmp_path: Path) -> None:
    """Why the gate exists: if this starts failing, milvus-lite applies upserts
    atomically and the gate (sidecar.memory.store.gate) can go."""
    store = await MemoryStore.open(StoreConfig(uri=str(tmp_path / "n.db")), 8, Metrics())
    store._gate = None
    try:
        found, missed = await reads_of_a_row_being_upserted(store, 3000)
        assert missed == 1, f"{found} reads during upserts all found the row"
    finally:
        await store.close()


# -- access counts ----------------------------------------------------------------------


async def test_access_rows_are_merged_into_every_read(tmp_path: Path) -> None:
    store = await MemoryStore.open(StoreConfig(uri=str(tmp_path / "a.db")), 8, Metrics())
    try:
        counted = record(1).with_changes(access_count=5, accessed_at=50)
        await store.upsert([counted, record(2), record(3)])
        await store.write_access([AccessStat("m1", "u1", 3, 100), AccessStat("m2", "u1", 7, 200)])
        # The higher count and the later time win: m1 keeps its own count of 5.
        expected = {"m1": (5, 100), "m2": (7, 200), "m3": (0, 0)}

        def seen(rows: list[MemoryRecord]) -> dict[str, tuple[int, int]]:
            return {r.id: (r.access_count, r.accessed_at) for r in rows}

        where = build_filter(owner="u1")
        assert seen(await store.query(where)) == expected
        assert seen(await store.scan(where, with_vectors=True)) == expected
        hits = await store.search(record(2).embedding or (), where=where, limit=3)
        assert seen([h.record for h in hits]) == expected
        assert hits[0].record.id == "m2"  # the order is the search's
        text_hits = await store.search_text("fact", where=where, limit=3)
        assert seen([h.record for h in text_hits]) == expected
        stats = await store.read_access(["m1", "m2", "m3"])
        assert stats == {
            "m1": AccessStat("m1", "u1", 3, 100),
            "m2": AccessStat("m2", "u1", 7, 200),
        }
        # The memory rows themselves are untouched.
        raw = await asyncio.to_thread(
            store._client.query, "memories", filter='id == "m2"', output_fields=["access_count"]
        )
        assert raw[0]["access_count"] == 0
    finally:
        await store.close()


async def test_tombstones_and_purges_take_the_access_rows_with_them(tmp_path: Path) -> None:
    store = await MemoryStore.open(StoreConfig(uri=str(tmp_path / "t.db")), 8, Metrics())
    try:
        await store.upsert([record(1), record(2), record(3)])
        await store.write_access([AccessStat(f"m{i}", "u1", i, i) for i in (1, 2, 3)])
        await store.upsert([record(1).with_changes(status=Status.DELETED, content="")])
        assert set(await store.read_access(["m1", "m2", "m3"])) == {"m2", "m3"}
        await store.delete(build_filter(owner="u1", ids=["m2"]))
        assert set(await store.read_access(["m1", "m2", "m3"])) == {"m3"}
        assert [r.id for r in await store.query(build_filter(owner="u1"))] == ["m3"]
    finally:
        await store.close()


@contextlib.contextmanager
def columns_only(store: MemoryStore) -> Iterator[None]:
    """Within it the client's row upsert fails the test: the columnar path is taken."""

    def no_rows(*args: object, **kwargs: object) -> None:
        raise AssertionError("rows were upserted row by row")

    row_upsert = store._client.upsert
    store._client.upsert = no_rows
    try:
        yield
    finally:
        store._client.upsert = row_upsert


async def test_memory_rows_written_by_column_and_by_row_read_back_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory rows go to the store column by column (the BM25 function fills its
    own field); a client without the columnar upsert takes the row upsert."""
    store = await MemoryStore.open(StoreConfig(uri=str(tmp_path / "t.db")), 8, Metrics())
    try:
        columnar = [record(i).with_changes(importance=0.25, group_id="g") for i in range(1, 6)]
        with columns_only(store):
            await store.upsert(columnar)
        monkeypatch.setattr(store, "_info", None)  # as with a client without it
        by_row = [record(i, user="u2").with_changes(related_ids=("m1",)) for i in range(6, 9)]
        await store.upsert(by_row)

        where = build_filter(owner="u1")
        stored = {r.id: r for r in await store.scan(where, with_vectors=True)}
        assert stored == {r.id: r for r in columnar}
        stored = {r.id: r for r in await store.scan(build_filter(owner="u2"), with_vectors=True)}
        assert stored == {r.id: r for r in by_row}
        hits = await store.search_text("fact 3", where=where, limit=1)  # BM25 over content
        assert [h.record.id for h in hits] == ["m3"]
    finally:
        await store.close()


async def test_access_rows_written_by_column_and_by_row_read_back_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Access rows go to the store column by column (the connection's columnar
    upsert); a client without it takes the row upsert. Both replace rows by id."""
    store = await MemoryStore.open(StoreConfig(uri=str(tmp_path / "t.db")), 8, Metrics())
    try:
        columnar = [AccessStat(f"m{i}", "u1", i, 1_000 + i) for i in range(1, 301)]
        with columns_only(store):
            await store.write_access(columnar)
            await store.write_access([AccessStat("m1", "u1", 9, 2_000)])  # replaced, not added
        read = await store.read_access([s.id for s in columnar])
        assert read == {s.id: s for s in [AccessStat("m1", "u1", 9, 2_000), *columnar[1:]]}

        monkeypatch.setattr(store, "_access_info", None)  # as with a client without it
        by_row = [AccessStat(f"m{i}", "u2", 2 * i, 3_000 + i) for i in range(250, 351)]
        await store.write_access(by_row)
        read = await store.read_access([f"m{i}" for i in range(1, 351)])
        replaced = AccessStat("m1", "u1", 9, 2_000)
        assert read == {s.id: s for s in [replaced, *columnar[1:249], *by_row]}
    finally:
        await store.close()


async def test_a_store_from_before_the_access_collection_gets_one(tmp_path: Path) -> None:
    config = StoreConfig(uri=str(tmp_path / "up.db"), collection="mem")
    store = await MemoryStore.open(config, 8, Metrics())
    await store.upsert([record(1).with_changes(access_count=4, accessed_at=40)])
    await asyncio.to_thread(store._client.drop_collection, "mem__access")
    await store.close()

    again = await MemoryStore.open(config, 8, Metrics())
    try:
        rows = await again.query(build_filter(owner="u1"))
        assert [(r.access_count, r.accessed_at) for r in rows] == [(4, 40)]
        await again.write_access([AccessStat("m1", "u1", 5, 50)])
        rows = await again.query(build_filter(owner="u1"))
        assert [(r.access_count, r.accessed_at) for r in rows] == [(5, 50)]
    finally:
        await again.close()


async def test_links_are_one_varchar_and_a_version_1_collection_still_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 2 keeps ``related_ids`` as a JSON array in a VARCHAR (milvus-lite returns
    ARRAY fields slowly); a version-1 collection is opened and written as it is."""
    from sidecar.memory.store import collections as store_module
    from sidecar.memory.store import schema as schema_module

    linked = record(1).with_changes(related_ids=("m2", "m 3", 'q"uote'))
    fresh = await MemoryStore.open(StoreConfig(uri=str(tmp_path / "v2.db")), 8, Metrics())
    try:
        assert fresh.schema_version == 3
        await fresh.upsert([linked, record(2)])
        raw = await asyncio.to_thread(
            fresh._client.query, "memories", filter='id == "m1"', output_fields=["related_ids"]
        )
        assert raw[0]["related_ids"] == '["m2","m 3","q\\"uote"]'
        rows = {r.id: r for r in await fresh.query(build_filter(owner="u1"))}
        assert rows["m1"].related_ids == ("m2", "m 3", 'q"uote')
        assert rows["m2"].related_ids == ()
    finally:
        await fresh.close()

    config = StoreConfig(uri=str(tmp_path / "v1.db"), collection="mem")
    with monkeypatch.context() as patch:  # a store written by version 1
        patch.setattr(schema_module, "FIELDS", tuple(collection_fields(1)))
        patch.setattr(store_module, "SCHEMA_TAG", LEGACY_SCHEMA_TAG)
        patch.setattr(store_module, "SCHEMA_VERSION", 1)
        old = await MemoryStore.open(config, 8, Metrics())
        assert old.schema_version == 1
        await old.upsert([linked])
        await old.close()

    again = await MemoryStore.open(config, 8, Metrics())
    try:
        assert again.schema_version == 1
        await again.upsert([record(2).with_changes(related_ids=("m1",))])
        rows = {r.id: r for r in await again.query(build_filter(owner="u1"))}
        assert rows["m1"].related_ids == ("m2", "m 3", 'q"uote')
        assert rows["m2"].related_ids == ("m1",)
        raw = await asyncio.to_thread(
            again._client.query, "mem", filter='id == "m2"', output_fields=["related_ids"]
        )
        assert raw[0]["related_ids"] == ["m1"]
    finally:
        await again.close()

    # What `sidecar store migrate` reads from it goes into a current collection.
    schema, rows = await MemoryStore.read_collection(config, "mem", Metrics())
    assert schema == LEGACY_SCHEMA_TAG
    target = await MemoryStore.open(config.model_copy(update={"collection": "mem2"}), 8, Metrics())
    try:
        assert target.schema_version == 3
        await target.upsert(rows)
        copied = {r.id: r.related_ids for r in await target.query(build_filter(owner="u1"))}
        assert copied == {"m1": ("m2", "m 3", 'q"uote'), "m2": ("m1",)}
    finally:
        await target.close()


@pytest.mark.parametrize("broken", ["", None, "not json", '{"a": 1}', "["])
def test_decode_related_reads_either_version_and_never_fails(broken: object) -> None:
    assert decode_related(encode_related(["a", "b c"])) == ("a", "b c")
    assert decode_related(["a", "b"]) == ("a", "b")
    assert encode_related([]) == ""
    assert decode_related(broken) == ()


async def test_a_version_2_collection_opens_without_provenance_and_migrates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 3 adds ``excerpt`` and ``provenance``; a version-2 collection is opened
    and written as it is (neither kept), and ``store migrate`` copies it into one that
    keeps them."""
    from sidecar.memory.store import collections as store_module
    from sidecar.memory.store import schema as schema_module

    said = record(1).with_changes(
        excerpt="I moved to Porto last May.",
        origins=(Origin("req-1", session="s1", message=2, refs=("t1", "t2"), at=5),),
    )
    config = StoreConfig(uri=str(tmp_path / "v2.db"), collection="mem")
    with monkeypatch.context() as patch:
        patch.setattr(schema_module, "FIELDS", tuple(collection_fields(2)))
        patch.setattr(store_module, "SCHEMA_TAG", schema_module.schema_tag(2))
        patch.setattr(store_module, "SCHEMA_VERSION", 2)
        old = await MemoryStore.open(config, 8, Metrics())
        await old.upsert([said])
        await old.close()
    again = await MemoryStore.open(config, 8, Metrics())
    try:
        assert again.schema_version == 2
        await again.upsert([said.with_changes(id="m9")])
        rows = await again.query(build_filter(owner="u1"))
        assert {(r.id, r.excerpt, r.origins) for r in rows} == {("m1", "", ()), ("m9", "", ())}
    finally:
        await again.close()

    tag, copied = await MemoryStore.read_collection(config, "mem", Metrics())
    assert tag == schema_module.schema_tag(2)
    fresh = await MemoryStore.open(config.model_copy(update={"collection": "mem3"}), 8, Metrics())
    try:
        assert fresh.schema_version == schema_module.SCHEMA_VERSION
        await fresh.upsert([*copied, said])
        rows = {r.id: r for r in await fresh.query(build_filter(owner="u1"))}
        assert rows.keys() == {"m1", "m9"}
        assert rows["m1"].excerpt == "I moved to Porto last May."
        assert rows["m1"].origins == said.origins
    finally:
        await fresh.close()


@pytest.mark.parametrize("broken", ["", None, "not json", '{"a": 1}', '[{"no": "turn"}]', "["])
def test_decode_origins_never_fails_and_encode_fits_the_column(broken: object) -> None:
    from sidecar.memory.store.schema import PROVENANCE_BYTES, decode_origins, encode_origins

    assert decode_origins(broken) == ()
    one = (Origin("req-1", session="s", message=3, refs=("a", "b"), at=7),)
    assert decode_origins(encode_origins(one)) == one
    many = tuple(Origin("t" * 60 + str(i), refs=("r" * 200,), at=i) for i in range(40))
    encoded = encode_origins(many)
    assert len(encoded.encode()) <= PROVENANCE_BYTES
    kept = decode_origins(encoded)
    assert kept[0] == many[0]  # the first turn, then the latest that fit
    assert kept[-1] == many[-1]
