"""Entity links on the write path: a new memory links to the owner's memories that
name the same entity, both ways, the most similar first; never across owners, never
on a name too many memories carry, never on part of a word."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sidecar.config import CacheConfig, EnrichmentConfig
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.records.records import MemoryRecord
from sidecar.memory.write.rows.enrich import Enricher
from sidecar.metrics import Metrics
from tests.support.fakes import FakeStore

#: Similarity links off: only entity links can join these memories.
CONFIG = EnrichmentConfig(max_links=0)


def memory(mid: str, text: str, vector: tuple[float, ...], owner: str = "u1") -> MemoryRecord:
    return MemoryRecord(id=mid, user_id=owner, content=text, embedding=vector, created_at=1)


@pytest.fixture
async def store() -> FakeStore:
    return FakeStore(4)


@pytest.fixture
async def cache(store: FakeStore) -> AsyncIterator[CorpusCache]:
    cache = CorpusCache(store, CacheConfig(), Metrics())
    yield cache
    await cache.close()


async def enrich(
    store: FakeStore,
    cache: CorpusCache,
    stored: list[MemoryRecord],
    new: list[MemoryRecord],
    config: EnrichmentConfig = CONFIG,
) -> dict[str, MemoryRecord]:
    await store.upsert(stored)
    cache.clear()
    rows = await Enricher(cache, config).enrich(new[0].user_id, new)
    return {r.id: r for r in rows}


async def test_a_new_fact_links_to_the_fact_that_names_its_entity_both_ways(
    store: FakeStore, cache: CorpusCache
) -> None:
    sister = memory("sister", "User's sister is Ana.", (1.0, 0.0, 0.0, 0.0))
    other = memory("other", "User likes hiking.", (0.0, 1.0, 0.0, 0.0))
    porto = memory("porto", "Ana lives in Porto.", (0.0, 0.0, 1.0, 0.0))
    rows = await enrich(store, cache, [sister, other], [porto])
    assert rows["porto"].related_ids == ("sister",)
    assert rows["sister"].related_ids == ("porto",)  # the stored fact gets the back-link
    assert "other" not in rows


async def test_new_memories_of_one_batch_link_to_each_other(
    store: FakeStore, cache: CorpusCache
) -> None:
    rows = await enrich(
        store,
        cache,
        [],
        [
            memory("a", "User works at Helix Labs.", (1.0, 0.0, 0.0, 0.0)),
            memory("b", "Helix Labs is based in Rotterdam.", (0.0, 1.0, 0.0, 0.0)),
        ],
    )
    assert rows["a"].related_ids == ("b",)
    assert rows["b"].related_ids == ("a",)


async def test_no_link_into_another_owners_memories(store: FakeStore, cache: CorpusCache) -> None:
    theirs = memory("theirs", "Ana lives in Porto.", (1.0, 0.0, 0.0, 0.0), owner="u2")
    mine = memory("mine", "User's sister is Ana.", (1.0, 0.0, 0.0, 0.0))
    rows = await enrich(store, cache, [theirs], [mine])
    assert rows["mine"].related_ids == ()
    assert "theirs" not in rows


async def test_part_of_a_word_is_not_the_name(store: FakeStore, cache: CorpusCache) -> None:
    stored = memory("x", "Anastasia lives in Porto.", (1.0, 0.0, 0.0, 0.0))
    rows = await enrich(
        store, cache, [stored], [memory("n", "User's sister is Ana.", (1, 0, 0, 0))]
    )
    assert rows["n"].related_ids == ()


async def test_the_most_similar_holders_first_and_at_most_max_entity_links(
    store: FakeStore, cache: CorpusCache
) -> None:
    stored = [memory(f"m{i}", f"Ana fact number {i}.", (1.0, float(i), 0.0, 0.0)) for i in range(6)]
    new = memory("new", "User's sister is Ana.", (1.0, 0.0, 0.0, 0.0))
    config = EnrichmentConfig(max_links=0, max_entity_links=2)
    rows = await enrich(store, cache, stored, [new], config)
    assert rows["new"].related_ids == ("m0", "m1")  # cosine 1.0 and 0.71 to the new fact


async def test_a_name_that_many_memories_carry_links_nothing(
    store: FakeStore, cache: CorpusCache
) -> None:
    # A speaker's name on every line of a transcript tells nothing about which
    # memory is about it: above max(entity_min_holders, share of the owner's) no link.
    stored = [
        memory(f"m{i}", f"Mel: note {i}. Mel is here.", (1.0, float(i), 0, 0)) for i in range(9)
    ]
    rows = await enrich(store, cache, stored, [memory("new", "Mel is my friend.", (1, 0, 0, 0))])
    assert rows["new"].related_ids == ()
    few = stored[:3]
    store.rows.clear()
    rows = await enrich(store, cache, few, [memory("new", "Mel is my friend.", (1, 0, 0, 0))])
    assert set(rows["new"].related_ids) == {"m0", "m1", "m2"}


async def test_off_when_max_entity_links_is_zero(store: FakeStore, cache: CorpusCache) -> None:
    sister = memory("sister", "User's sister is Ana.", (1.0, 0.0, 0.0, 0.0))
    porto = memory("porto", "Ana lives in Porto.", (0.0, 0.0, 1.0, 0.0))
    config = EnrichmentConfig(max_links=0, max_entity_links=0)
    rows = await enrich(store, cache, [sister], [porto], config)
    assert rows["porto"].related_ids == ()
