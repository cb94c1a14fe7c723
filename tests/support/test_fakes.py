"""The fakes keep their word: the embedder's vectors, the LLM's script, and a store
that reads what the real one (milvus-lite) reads for the same rows and filters."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from sidecar.config import StoreConfig
from sidecar.errors import LLMTimeout, LLMUnavailable, StoreError
from sidecar.llm import ChatMessage
from sidecar.memory.records.embeddings import Embedding
from sidecar.memory.records.records import (
    AccessStat,
    MemoryRecord,
    NodeType,
    Scope,
    Status,
    Visibility,
    as_vector,
)
from sidecar.memory.store.filters import Filter, build_filter, ids_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics
from tests.memory.store.test_filters import CRAFTED_GROUPS, CRAFTED_OWNERS
from tests.support.fakes import FakeEmbedder, FakeLLM, FakeStore, filter_predicate

# -- the embedder ------------------------------------------------------------------------


async def test_fake_embedder_gives_unit_vectors_by_words_and_records_calls() -> None:
    embedder = FakeEmbedder(dim=16)
    vectors = await embedder.embed(["I live in Berlin", "i LIVE in berlin!", "Cats", ""])
    assert vectors.shape == (4, 16)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert np.array_equal(vectors[0], vectors[1])  # the same words, whatever the case
    assert vectors[3].tolist() == [1.0] + [0.0] * 15  # no words: the first unit vector
    shared = await embedder.embed(["I live in Berlin now"], urgent=True)
    assert float(vectors[0] @ shared[0]) > float(vectors[0] @ vectors[2])
    assert np.array_equal(embedder.vector("Cats"), vectors[2])  # no call recorded
    assert embedder.calls == [["I live in Berlin", "i LIVE in berlin!", "Cats", ""], [
        "I live in Berlin now"
    ]]  # fmt: skip
    assert embedder.urgent == [False, True]
    assert embedder.texts_embedded == 5
    assert (await embedder.embed([])).shape == (0, 16)
    embedder.error = RuntimeError("model gone")
    with pytest.raises(RuntimeError):
        await embedder.embed(["x"])
    await embedder.close()
    assert embedder.closed


# -- the LLM -----------------------------------------------------------------------------

PROMPT: list[ChatMessage] = [{"role": "user", "content": "LATEST: where?"}]


async def test_fake_llm_answers_by_task_and_records_every_call() -> None:
    llm = FakeLLM({"rewrite": {"query": "Where is Ana?"}, "rank": lambda m: [len(m)]})
    answer = await llm.chat_json("rewrite", PROMPT, temperature=0.0, timeout_s=1.0)
    assert answer == {"query": "Where is Ana?"}
    answer["query"] = "changed by the caller"
    assert await llm.chat_json("rewrite", PROMPT) == {"query": "Where is Ana?"}  # a copy
    assert await llm.chat_json("rank", PROMPT * 3) == [3]
    assert llm.tasks() == ["rewrite", "rewrite", "rank"]
    first = llm.calls_of("rewrite")[0]
    assert (first.messages, first.temperature, first.timeout_s) == (tuple(PROMPT), 0.0, 1.0)
    with pytest.raises(AssertionError, match="'extract'"):  # unscripted: the test's bug
        await llm.chat_json("extract", PROMPT)
    assert llm.configured
    assert not FakeLLM(configured=False).configured


async def test_fake_llm_fails_and_times_out_on_demand() -> None:
    llm = FakeLLM({"dedup": {"decision": "add"}}).fail("dedup", LLMUnavailable("down"))
    with pytest.raises(LLMUnavailable):
        await llm.chat_json("dedup", PROMPT)
    llm.answer("dedup", {"decision": "noop"}).stall("dedup", 5.0)
    started = asyncio.get_running_loop().time()
    with pytest.raises(LLMTimeout):  # the caller's budget, as LLMClient enforces it
        await llm.chat_json("dedup", PROMPT, timeout_s=0.02)
    assert asyncio.get_running_loop().time() - started < 1.0
    llm.stall("dedup", 0.01)
    assert await llm.chat_json("dedup", PROMPT, timeout_s=1.0) == {"decision": "noop"}
    slow = FakeLLM({"extract": {"facts": []}}, stalls={"extract": 5.0}, timeout_s=0.02)
    with pytest.raises(LLMTimeout):  # no budget given: the fake's own, like llm.timeout_s
        await slow.chat_json("extract", PROMPT)
    assert len(llm.calls) == 3


# -- the store: the same answers as milvus-lite ------------------------------------------

DIM = 4


def vector(i: int) -> Embedding:
    angle = i * 0.7
    return as_vector((float(np.cos(angle)), float(np.sin(angle)), 0.25 * (i % 3), 0.1))


def world() -> list[MemoryRecord]:
    """Every kind of row a filter tells apart, owners and groups crafted to break out
    of a quoted string, a few created_at ties."""
    rows: list[MemoryRecord] = []
    kinds: list[dict[str, object]] = [
        {},
        {"visibility": Visibility.GROUP},
        {"visibility": Visibility.PUBLIC},
        {"status": Status.SUPERSEDED, "superseded_by": "r0"},
        {"status": Status.DELETED, "content": ""},
        {"node_type": NodeType.CATEGORY, "visibility": Visibility.GROUP},
        {"status": Status.ARCHIVED, "source": "import"},
    ]
    for i, owner in enumerate(CRAFTED_OWNERS):
        for j, kind in enumerate(kinds):
            n = i * len(kinds) + j
            fields: dict[str, object] = {
                "content": f"memory {n} of owner {i} about tea and Lisbon"[: 20 + n % 25],
                "group_id": CRAFTED_GROUPS[n % len(CRAFTED_GROUPS)],
                "session_id": f"s{n % 4}",
                "importance": 0.1 * (n % 10),
                "created_at": 1000 + n // 2,
                "updated_at": 5000 + n * 10,
                "related_ids": (f"r{n - 1}",) if n else (),
                **kind,
            }
            rows.append(
                MemoryRecord(id=f"r{n}", user_id=owner, embedding=vector(n), **fields)  # type: ignore[arg-type]
            )
    return rows


@dataclass
class Pair:
    real: MemoryStore
    fake: FakeStore


@pytest.fixture(scope="module")
async def pair(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pair]:
    path: Path = tmp_path_factory.mktemp("fakes") / "real.db"
    real = await MemoryStore.open(StoreConfig(uri=str(path)), DIM, Metrics())
    fake = FakeStore(DIM)
    rows = world()
    stats = [AccessStat(r.id, r.user_id, 3, 9000) for r in rows[::5]]
    for store in (real, fake):
        await store.upsert(rows)
        await store.write_access(stats)
    try:
        yield Pair(real, fake)
    finally:
        await real.close()


FILTERS: list[Filter] = [
    build_filter(owner="alice"),
    build_filter(owner=CRAFTED_OWNERS[2]),
    build_filter(owner="a\\", status=None),
    build_filter(owner="a\\", status=None, deleted=True),
    build_filter(owner='"', node_type=None),
    build_filter(scope=Scope("bob")),
    build_filter(scope=Scope("alice", ("team", CRAFTED_GROUPS[4]))),
    build_filter(scope=Scope("nobody", CRAFTED_GROUPS)),
    build_filter(ids=["r1", "r8", "r9", "nope"], status=None),
    build_filter(owner="bob", status=Status.SUPERSEDED),
    build_filter(owner="bob", node_type=NodeType.CATEGORY),
    build_filter(updated_since=5400, updated_before=5800, node_type=None, status=None),
    build_filter(updated_since=6000, deleted=True, status=None),
    build_filter(equals={"session_id": "s1", "source": "import"}, status=Status.ARCHIVED),
    build_filter(visibilities=[Visibility.PUBLIC, Visibility.GROUP]),
    build_filter(equals={"superseded_by": "r0"}, status=None),
    ids_filter(["r3", "r4", "r40"]),
]


@pytest.mark.parametrize("where", FILTERS, ids=range(len(FILTERS)))
async def test_the_fake_store_reads_what_milvus_lite_reads(pair: Pair, where: Filter) -> None:
    for with_vectors in (False, True):
        real = await pair.real.query(where, limit=500, with_vectors=with_vectors)
        fake = await pair.fake.query(where, limit=500, with_vectors=with_vectors)
        assert fake == real
    assert await pair.fake.scan(where) == await pair.real.scan(where)
    assert await pair.fake.count(where) == await pair.real.count(where)
    assert await pair.fake.owners(where) == await pair.real.owners(where)
    probe = vector(11)
    real_hits = await pair.real.search(probe, where=where, limit=5, strong=True)
    fake_hits = await pair.fake.search(probe, where=where, limit=5)
    assert [h.record for h in fake_hits] == [h.record for h in real_hits]
    assert [h.score for h in fake_hits] == pytest.approx([h.score for h in real_hits], abs=1e-5)


async def test_the_fake_store_pages_and_merges_access_as_milvus_lite_does(pair: Pair) -> None:
    everything = build_filter(node_type=None, status=None, deleted=True, updated_since=0)
    assert await pair.fake.count(everything) == len(world())
    # Pages of the primary key's order, each returned oldest first.
    real = [await pair.real.query(everything, limit=10, offset=o) for o in (0, 10, 20)]
    fake = [await pair.fake.query(everything, limit=10, offset=o) for o in (0, 10, 20)]
    assert fake == real
    assert [len(page) for page in fake] == [10, 10, 10]
    counted = [r for r in await pair.fake.scan(everything) if r.access_count == 3]
    assert counted == [r for r in await pair.real.scan(everything) if r.access_count == 3]
    assert counted  # active and archived rows with an access row, not tombstones
    ids = ["r0", "r5", "r6", "nope"]
    assert await pair.fake.read_access(ids) == await pair.real.read_access(ids)


async def test_the_fake_store_refuses_what_milvus_refuses() -> None:
    store = FakeStore(DIM)
    row = MemoryRecord(id="a", user_id="u", content="x", embedding=as_vector((1.0, 0.0, 0.0, 0.0)))
    with pytest.raises(StoreError, match="dims"):
        await store.upsert([row.with_changes(embedding=as_vector((1.0, 0.0)))])
    with pytest.raises(StoreError, match="id is over 64 bytes"):
        await store.upsert([row.with_changes(id="x" * 65)])
    with pytest.raises(StoreError, match="no embedding"):
        await store.upsert([row.with_changes(embedding=None)])
    with pytest.raises(StoreError, match="window"):
        await store.query(build_filter(owner="u"), limit=16_000, offset=1_000)
    assert store.rows == {}
    for unreadable in ('user_id like "a%"', "content == 'x'", 'user_id == "a" xor id == "b"'):
        with pytest.raises(ValueError, match=r"unreadable|expected"):
            filter_predicate(Filter(unreadable))


async def test_filters_milvus_lite_refuses_are_refused(pair: Pair) -> None:
    """milvus-lite 2.5 reads no ``true``/``false`` literal and no ``not (...)``: an
    empty id list (``build_filter(ids=[])``, written as ``false``) is an error there,
    so it is one in the fake too."""
    for where in (
        build_filter(ids=[]),
        build_filter(ids=[], node_type=None, status=None, deleted=True),
        Filter('not (user_id == "alice")'),
    ):
        for store in (pair.real, pair.fake):
            with pytest.raises(StoreError):
                await store.query(where)


async def test_the_fake_store_deletes_searches_text_and_counts_calls() -> None:
    store = FakeStore(DIM)
    rows = [
        MemoryRecord(id=f"m{i}", user_id="u", content=text, embedding=vector(i), created_at=i)
        for i, text in enumerate(["green tea in Lisbon", "black coffee", "tea, tea and tea"])
    ]
    await store.upsert(rows)
    await store.write_access([AccessStat("m0", "u", 2, 10), AccessStat("m1", "u", 1, 10)])
    hits = await store.search_text("tea", where=build_filter(owner="u"), limit=5)
    assert [h.record.id for h in hits] == ["m2", "m0"]  # the coffee has no tea
    await store.upsert([rows[1].with_changes(status=Status.DELETED)])  # a tombstone
    await store.delete(build_filter(ids=["m0"], status=None))
    assert sorted(store.rows) == ["m1", "m2"]
    assert store.access == {}  # gone with the tombstone and the delete
    assert store.calls == {"upsert": 2, "write_access": 1, "search_text": 1, "delete": 1}
    store.error = StoreError("down")
    with pytest.raises(StoreError):
        await store.count(build_filter(owner="u"))
