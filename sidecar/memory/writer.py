"""The write pipeline for one turn: extract facts, drop duplicates, embed, store."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from sidecar.config import ExtractionConfig
from sidecar.memory.corpus import CorpusCache
from sidecar.memory.embedder import Embedder
from sidecar.memory.enrich import Enricher
from sidecar.memory.extraction import FactExtractor
from sidecar.memory.filters import build_filter
from sidecar.memory.records import MemoryRecord, content_hash, memory_id, normalize_text
from sidecar.memory.store import MemoryStore
from sidecar.memory.turns import Fact, Turn
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WriteResult:
    stored: int = 0
    duplicates: int = 0


class KeyedLocks:
    """One asyncio lock per key, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def get(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock


class MemoryWriter:
    """Turns a completed turn into stored memories. Writes for one user are
    serialised (so concurrent turns cannot both miss each other's duplicate);
    different users proceed in parallel.
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        extractor: FactExtractor,
        enricher: Enricher,
        cache: CorpusCache,
        metrics: Metrics,
        *,
        extraction_config: Callable[[str], ExtractionConfig],
        max_content_chars: int,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._extractor = extractor
        self._enricher = enricher
        self._cache = cache
        self._metrics = metrics
        self._extraction_config = extraction_config
        self._max_chars = max_content_chars
        self._locks = KeyedLocks()

    async def write_turn(self, turn: Turn) -> WriteResult:
        config = self._extraction_config(turn.profile)
        facts = await self._extractor.extract(turn, config)
        if not facts:
            return WriteResult()
        async with self._locks.get(turn.user_id):
            return await self._store_facts(turn, facts, config)

    async def _store_facts(
        self, turn: Turn, facts: list[Fact], config: ExtractionConfig
    ) -> WriteResult:
        texts = [f.text[: self._max_chars] for f in facts]
        vectors = await self._embedder.embed(texts)
        owner = build_filter(owner=turn.user_id)
        fresh: list[MemoryRecord] = []
        duplicates = 0
        seen: set[str] = set()
        for fact, text, vector in zip(facts, texts, vectors, strict=True):
            key = normalize_text(text)
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            nearest = await self._store.search(vector, where=owner, limit=1, strong=True)
            if nearest and nearest[0].score >= config.duplicate_threshold:
                duplicates += 1
                self._metrics.facts.labels(decision="duplicate").inc()
                continue
            fresh.append(
                MemoryRecord(
                    id=memory_id(turn.user_id, text),
                    user_id=turn.user_id,
                    content=text,
                    embedding=tuple(float(x) for x in vector),
                    memory_type=fact.memory_type,
                    source=fact.source,
                    session_id=turn.session_id,
                    importance=fact.importance,
                    confidence=fact.confidence,
                    created_at=turn.created_at,
                    updated_at=turn.created_at,
                    content_hash=content_hash(text),
                )
            )
        if fresh:
            rows = await self._enricher.enrich(turn.user_id, fresh)
            await self._store.upsert(rows)
            self._cache.apply(rows)
            self._metrics.facts.labels(decision="stored").inc(len(fresh))
        return WriteResult(stored=len(fresh), duplicates=duplicates)
