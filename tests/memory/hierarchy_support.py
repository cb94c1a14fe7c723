"""A small topic corpus and a write-path harness for the hierarchy tests.

Four clear topics of ten facts for ``alice`` and three facts for ``bob``; memories
are written the way the write path writes them (embed, ``Enricher.enrich`` with the
categorizer, upsert, invalidate the cache).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sidecar.config import (
    CacheConfig,
    EnrichmentConfig,
    HierarchyBuildConfig,
    StoreConfig,
    TaxonomyConfig,
)
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import MemoryRecord, NodeType, Status, content_hash, memory_id
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.write.rows.enrich import Enricher
from sidecar.memory.write.tree.clustering import words
from sidecar.memory.write.tree.hierarchy import Hierarchy
from sidecar.metrics import Metrics
from tests.support.writes import gateway

TOPICS: dict[str, tuple[str, ...]] = {
    "cooking": (
        "I love cooking fresh pasta with tomato sauce on Sunday evenings.",
        "My favourite recipe is a slow-cooked beef stew with red wine.",
        "I bake sourdough bread every weekend using my own starter.",
        "I make homemade pizza dough and bake it in a very hot oven.",
        "My kitchen has a cast iron skillet I use for searing steak.",
        "I cook a big pot of vegetable curry with coconut milk for meal prep.",
        "I like to roast chicken with garlic, lemon and rosemary.",
        "Risotto is my go-to dinner recipe when guests come over.",
        "I always season soups with fresh herbs from my kitchen garden.",
        "I learned to make dumplings from my grandmother's recipe.",
    ),
    "hiking": (
        "I go hiking in the mountains almost every Saturday.",
        "Last summer I hiked a long section of the Pacific Crest Trail in Oregon.",
        "My hiking boots are waterproof leather boots I bought in Denver.",
        "I prefer alpine trails with steep climbs and views of glaciers.",
        "I carry a lightweight tent and sleeping bag for overnight backpacking trips.",
        "My favourite trail runs along a ridge above a mountain lake.",
        "I always pack a map, compass and headlamp when hiking.",
        "We camped near the summit and watched the sunrise over the peaks.",
        "I track my hikes and elevation gain with a GPS watch.",
        "Trekking poles save my knees on long mountain descents.",
    ),
    "programming": (
        "I write most of my code in Python and use type hints everywhere.",
        "At work I maintain a Rust service that parses log files.",
        "I debug tricky concurrency bugs in asyncio code.",
        "My editor is Neovim with a language server for Python.",
        "I write unit tests with pytest before refactoring code.",
        "I use git rebase to keep a clean commit history.",
        "Our backend API is written in Go and deployed on Kubernetes.",
        "I profile slow Python functions with cProfile and fix hot loops.",
        "I review pull requests from my team every morning.",
        "I am learning to write compilers and parsers in my free time.",
    ),
    "music": (
        "I play acoustic guitar and practise chords every evening.",
        "I have taken piano lessons since I was seven years old.",
        "My favourite band is Radiohead and I saw them in concert twice.",
        "I sing in a choir that performs classical music at Christmas.",
        "I record songs at home with a small audio interface and microphone.",
        "Jazz piano improvisation is what I practise on weekends.",
        "I collect vinyl records of classic rock albums.",
        "I write my own songs with lyrics about travel.",
        "I went to a music festival with three stages of live bands.",
        "I tune my guitar by ear before every rehearsal with my band.",
    ),
}

BOB_FACTS: tuple[str, ...] = (
    "I cook spicy ramen noodles in my kitchen every night.",
    "I hike in the desert canyons of Utah.",
    "I play drums in a punk rock band.",
)

QUERIES: dict[str, str] = {
    "cooking": "What do I like to cook and bake in my kitchen?",
    "hiking": "Tell me about my hiking trips and trails in the mountains",
    "programming": "Which programming languages and tools do I use for code?",
    "music": "What music do I play, which instruments and bands?",
}


def topic_of(text: str) -> str:
    for topic, facts in TOPICS.items():
        if text in facts:
            return topic
    return "bob"


def vocabulary(topic: str) -> set[str]:
    """Surface words used by ``topic``'s facts and by no other topic."""
    own = {w for fact in TOPICS[topic] for _, w in words(fact)}
    others = {
        w for t, facts in TOPICS.items() if t != topic for fact in facts for _, w in words(fact)
    }
    return own - others


def interleaved() -> list[str]:
    """Alice's facts, topics interleaved (the order a conversation would give)."""
    return [TOPICS[t][i] for i in range(10) for t in sorted(TOPICS)]


@dataclass
class Harness:
    store: MemoryStore
    cache: CorpusCache
    hierarchy: Hierarchy
    enricher: Enricher
    embedder: Embedder

    @classmethod
    async def open(
        cls, path: Path, embedder: Embedder, config: HierarchyBuildConfig | None = None
    ) -> Harness:
        metrics = Metrics()
        store = await MemoryStore.open(StoreConfig(uri=str(path)), embedder.dim, metrics)
        cache = CorpusCache(store, CacheConfig(), metrics)
        writes = gateway(store, cache)
        # The clustering path: no taxonomy topics unless the config asks for them.
        no_taxonomy = HierarchyBuildConfig(schedule_s=0, taxonomy=TaxonomyConfig(enabled=False))
        hierarchy = Hierarchy(store, writes, cache, embedder, config or no_taxonomy)
        return cls(
            store, cache, hierarchy, Enricher(cache, EnrichmentConfig(), hierarchy), embedder
        )

    async def records(self, owner: str, texts: Sequence[str], start: int = 0) -> list[MemoryRecord]:
        vectors = await self.embedder.embed(list(texts))
        return [
            MemoryRecord(
                id=memory_id(owner, text),
                user_id=owner,
                content=text,
                embedding=tuple(float(x) for x in vector),
                created_at=start + i,
                updated_at=start + i,
                content_hash=content_hash(text),
            )
            for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))
        ]

    async def write(
        self,
        owner: str,
        texts: Sequence[str],
        *,
        batch: int = 4,
        topic: Callable[[str], str] | None = None,
    ) -> None:
        """Write ``texts`` through the enricher in small batches (like turns), each
        with the topic ``topic`` names for it (none: filed by similarity)."""
        for start in range(0, len(texts), batch):
            fresh = await self.records(owner, texts[start : start + batch], start)
            topics = {r.id: topic(r.content) for r in fresh} if topic else None
            rows = await self.enricher.enrich(owner, fresh, topics)
            await self.store.upsert(rows)
            for row in rows:
                self.cache.invalidate(row)

    async def categories(self, owner: str, *, active_only: bool = True) -> list[MemoryRecord]:
        where = build_filter(
            owner=owner, node_type=NodeType.CATEGORY, status=Status.ACTIVE if active_only else None
        )
        return await self.store.scan(where, with_vectors=True)

    async def memories(self, owner: str) -> list[MemoryRecord]:
        return await self.store.scan(build_filter(owner=owner), with_vectors=True)

    async def close(self) -> None:
        await self.hierarchy.stop()
        await self.cache.close()
        await self.store.close()
