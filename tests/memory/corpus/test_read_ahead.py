"""Memories are read as they enter the corpus cache (issue S, item 2): a load or a
write reads each memory's term ids, vector row and the retrieval stages' values
into the memo, so the first request that builds a snapshot of them reads no memory
text; a load that is invalidated while it reads stops, and a writer process's
cache reads only what its own snapshots need."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from sidecar.config import CacheConfig, RetrievalConfig, StoreConfig
from sidecar.memory.corpus import read_ahead
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.corpus.derived import column_key
from sidecar.memory.corpus.rows import TERM_IDS
from sidecar.memory.read.retrieval.base import Query, SearchSpace
from sidecar.memory.read.retrieval.registry import build_retrievers, memory_readers
from sidecar.memory.records.records import MemoryRecord, Scope
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics

DIM = 4
TEXTS = (
    "Melanie: I painted the lake at sunrise last Tuesday.",
    "User spent $120 on running shoes.",
    "Caroline: I'd love to visit Oslo next spring.",
    "User adopted a dog named Juniper in March.",
)


def rec(i: int, user: str = "alice") -> MemoryRecord:
    return MemoryRecord(
        id=f"{user}-{i}",
        user_id=user,
        content=TEXTS[i % len(TEXTS)],
        embedding=(1.0, float(i), 0.0, 0.0),
        session_id="s1",
        created_at=1_000 + i,
        # Each fact linked to the next: a question walks the links.
        related_ids=(f"{user}-{i + 1}",),
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MemoryStore]:
    opened = await MemoryStore.open(StoreConfig(uri=str(tmp_path / "r.db")), DIM, Metrics())
    await opened.upsert([rec(i) for i in range(8)])
    yield opened
    await opened.close()


class Counting:
    """Each reader of :func:`memory_readers`, counting the memories it reads."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def readers(self) -> tuple[tuple[str, object], ...]:
        def counted(name: str, read):  # type: ignore[no-untyped-def]
            def wrapped(record: MemoryRecord) -> object:
                self.calls[name] = self.calls.get(name, 0) + 1
                return read(record)

            return wrapped

        return tuple((name, counted(name, read)) for name, read in memory_readers())


async def test_a_load_reads_every_memory_before_the_first_request(store: MemoryStore) -> None:
    cache = CorpusCache(store, CacheConfig(), Metrics(), readers=memory_readers())
    corpus = await cache.corpus(Scope("alice"))
    assert corpus.size == 8
    for record in corpus.records:
        values = cache._features.features(record).values
        assert TERM_IDS in values
        for name, _ in memory_readers():
            assert name in values, name


@pytest.mark.parametrize("readers", [memory_readers(), ()])
async def test_the_first_query_reads_no_memory_text_again(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch, readers: tuple[object, ...]
) -> None:
    """Read ahead, the stages find every value in the memo; without, they read."""
    from sidecar.memory.read.retrieval import conversation, cues, links

    cache = CorpusCache(store, CacheConfig(), Metrics(), readers=readers)  # type: ignore[arg-type]
    corpus = await cache.corpus(Scope("alice"))
    read: list[str] = []
    for module, name in (
        (cues, "tells_time"),
        (cues, "tells_amount"),
        (cues, "subject"),
        (conversation, "speaker"),
        (links, "names_user"),
    ):
        original = getattr(module, name)
        monkeypatch.setattr(
            module, name, lambda text, _o=original, _n=name: read.append(_n) or _o(text)
        )
    # Every cue asked: when, how much, whom.
    for text in ("When did Melanie paint the lake?", "How much did I spend on shoes?"):
        space = SearchSpace(Scope("alice"), corpus, store, RetrievalConfig())
        query = Query(text, np.asarray([1.0, 0.5, 0.0, 0.0], dtype=np.float32))
        assert await build_retrievers()["default"].retrieve(query, space, 4)
    if readers:
        assert read == []
    else:
        assert {"tells_time", "tells_amount", "subject", "speaker", "names_user"} <= set(read)


async def test_a_write_reads_the_rows_it_adds(store: MemoryStore) -> None:
    cache = CorpusCache(store, CacheConfig(), Metrics(), readers=memory_readers())
    await cache.corpus(Scope("alice"))
    written = rec(9)
    await store.upsert([written])
    cache.apply([written])
    values = cache._features.features(written).values
    assert column_key("speaker") in values
    assert "subject" in values
    assert TERM_IDS in values


async def test_a_writer_process_reads_only_what_its_snapshots_need(store: MemoryStore) -> None:
    cache = CorpusCache(store, CacheConfig(), Metrics())
    corpus = await cache.corpus(Scope("alice"))
    for record in corpus.records:
        values = cache._features.features(record).values
        assert TERM_IDS in values
        assert column_key("speaker") not in values


async def test_a_load_invalidated_while_it_reads_stops_reading(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each slice is one memory; the user is forgotten during the first pause: the
    rest of their memories are not read into the memo."""
    monkeypatch.setattr(read_ahead, "SLICE_S", -1.0)
    counting = Counting()
    cache = CorpusCache(store, CacheConfig(), Metrics(), readers=counting.readers())  # type: ignore[arg-type]
    original = read_ahead.asyncio.sleep
    forgotten: list[bool] = []

    async def pause(delay: float) -> None:
        if not forgotten:
            forgotten.append(True)
            cache.invalidate_user("alice")
        await original(delay)

    monkeypatch.setattr(read_ahead.asyncio, "sleep", pause)
    await cache._unit("user:alice")
    assert forgotten
    assert counting.calls.get(column_key("speaker"), 0) < 8
