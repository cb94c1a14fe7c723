"""The write pipeline for one turn: extract facts, judge each against what the user
has (add / update / supersede / no-op), enrich, store — and keep the corpus cache
current (write-through)."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from sidecar.config import ExtractionConfig
from sidecar.memory.corpus import Corpus, CorpusCache
from sidecar.memory.dedup import Candidate, Decision, DedupJudge, Judgement
from sidecar.memory.embedder import Embedder
from sidecar.memory.enrich import Enricher
from sidecar.memory.extraction import FactExtractor
from sidecar.memory.records import MemoryRecord, Scope, Status, content_hash, memory_id
from sidecar.memory.retrieval.signals import top_indices
from sidecar.memory.store import MemoryStore
from sidecar.memory.turns import Fact, Turn
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a turn's facts became."""

    stored: int = 0  # added
    duplicates: int = 0  # no-op
    updated: int = 0
    superseded: int = 0

    def counted(self, decision: Decision) -> WriteResult:
        field = {
            Decision.ADD: "stored",
            Decision.NOOP: "duplicates",
            Decision.UPDATE: "updated",
            Decision.SUPERSEDE: "superseded",
        }[decision]
        return replace(self, **{field: getattr(self, field) + 1})


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
        judge: DedupJudge,
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
        self._judge = judge
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

    async def _candidates(
        self, owner: str, vector: npt.NDArray[np.float32], config: ExtractionConfig
    ) -> tuple[list[Candidate], Corpus]:
        """The owner's own active memories most similar to ``vector`` (best first).
        The corpus is current: this process writes through it, other replicas'
        writes arrive within the cache TTL."""
        corpus = await self._cache.corpus(Scope(owner))
        if corpus.size == 0:
            return [], corpus
        similarity = corpus.vectors @ vector
        mine = np.asarray([r.user_id == owner for r in corpus.records], dtype=bool)
        order = top_indices(similarity, config.dedup_candidates, mine)
        return [
            Candidate(corpus.records[i].id, corpus.records[i].content, float(similarity[i]))
            for i in order
        ], corpus

    async def _store_facts(
        self, turn: Turn, facts: list[Fact], config: ExtractionConfig
    ) -> WriteResult:
        texts = [f.text[: self._max_chars] for f in facts]
        vectors = await self._embedder.embed(texts)
        result = WriteResult()
        for fact, text, vector in zip(facts, texts, vectors, strict=True):
            candidates, corpus = await self._candidates(turn.user_id, vector, config)
            judgement = await self._judge.judge(text, candidates, config)
            rows = await self._apply(turn, fact, text, vector, judgement, corpus)
            if rows:
                enriched = await self._enricher.enrich(turn.user_id, rows)
                await self._store.upsert(enriched)
                self._cache.apply(enriched)
            result = result.counted(judgement.decision)
        return result

    async def _apply(
        self,
        turn: Turn,
        fact: Fact,
        text: str,
        vector: npt.NDArray[np.float32],
        judgement: Judgement,
        corpus: Corpus,
    ) -> list[MemoryRecord]:
        """The rows ``judgement`` writes (the new one first)."""
        target = (
            corpus.records[corpus.index_of[judgement.target]]
            if judgement.target in corpus.index_of
            else None
        )
        if judgement.decision == Decision.NOOP:
            return []
        if judgement.decision == Decision.UPDATE and target is not None:
            merged = (judgement.text or text)[: self._max_chars]
            embedding = vector if merged == text else (await self._embedder.embed([merged]))[0]
            return [
                target.with_changes(
                    content=merged,
                    embedding=tuple(float(x) for x in embedding),
                    abstract="",
                    overview="",
                    content_hash=content_hash(merged),
                    updated_at=turn.created_at,
                    confidence=max(target.confidence, fact.confidence),
                    importance=max(target.importance, fact.importance),
                )
            ]
        record = MemoryRecord(
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
        if judgement.decision == Decision.SUPERSEDE and target is not None:
            # Never a blind delete: the old memory stays, marked, out of retrieval.
            old = target.with_changes(
                status=Status.SUPERSEDED, superseded_by=record.id, updated_at=turn.created_at
            )
            return [record.with_changes(related_ids=(target.id,)), old]
        return [record]
