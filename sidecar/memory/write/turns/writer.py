"""The write pipeline for one turn: extract facts, judge each against what the user
has (add / update / supersede / no-op), enrich, store — and keep the corpus cache
current (write-through)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from sidecar.config import ExtractionConfig
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.embedding_text import embedding_text
from sidecar.memory.language.entities import is_user_fact, mentions, named_subject
from sidecar.memory.language.facts import shape, slot_of
from sidecar.memory.language.sanitize import clean_turn
from sidecar.memory.records.records import (
    MemoryRecord,
    Scope,
    Status,
    Visibility,
    as_vector,
    content_hash,
    memory_id,
    now_ms,
)
from sidecar.memory.records.turns import Fact, Turn
from sidecar.memory.records.vectors import top_indices
from sidecar.memory.write.rows.enrich import Enricher
from sidecar.memory.write.rows.gateway import WriteGateway
from sidecar.memory.write.turns.dedup import Candidate, Decision, DedupJudge, Judgement
from sidecar.memory.write.turns.extraction import FactExtractor
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


class MemoryWriter:
    """Turns a completed turn into stored memories, through the write gateway.
    Writes for one user are serialised by the owner's lock (so concurrent turns
    cannot both miss each other's duplicate); different users proceed in parallel.

    Hygiene: the turn is cleaned and capped (``max_turn_chars``) before extraction,
    every fact before it is hashed, embedded or stored (:meth:`WriteGateway.clean`);
    a fact left with no letter or digit is dropped and counted
    (``memory_sidecar_facts_total{decision="dropped_invalid"}``).
    """

    def __init__(
        self,
        writes: WriteGateway,
        embedder: Embedder,
        extractor: FactExtractor,
        judge: DedupJudge,
        enricher: Enricher,
        cache: CorpusCache,
        metrics: Metrics,
        *,
        extraction_config: Callable[[str], ExtractionConfig],
        other_writers: bool = False,
    ) -> None:
        self._writes = writes
        self._embedder = embedder
        self._extractor = extractor
        self._judge = judge
        self._enricher = enricher
        self._cache = cache
        self._metrics = metrics
        self._extraction_config = extraction_config
        #: Other writers may exist (workers, replicas on a Milvus server): read the
        #: owner's rows written since the cached snapshot before judging against it.
        self._other_writers = other_writers

    async def write_turn(self, turn: Turn) -> WriteResult:
        config = self._extraction_config(turn.profile)
        turn = clean_turn(turn, config.max_turn_chars)
        facts = self._clean_facts(await self._extractor.extract(turn, config))
        if not facts:
            return WriteResult()
        async with self._writes.lock(turn.user_id):
            return await self._store_facts(turn, facts, config)

    def _known_subjects(self, facts: list[Fact], corpus: Corpus, owner: str) -> list[Fact]:
        """The facts, less those about someone or something (``Fact.about``) that no
        fact of the user's relations names (stored or of this turn: "User's sister
        is Ana."): "Ana lives in Porto." is worth keeping from a user whose sister
        is Ana, not small talk about strangers or general knowledge about a place
        the user lives in (counted as ``dropped_unknown_subject``)."""
        if not any(f.about for f in facts):
            return facts
        own = [f.text for f in facts if _relates(f.text)]
        own += [r.content for r in corpus.records if r.user_id == owner and _relates(r.content)]
        kept: list[Fact] = []
        for fact in facts:
            name = fact.about
            if name and not any(mentions(text, name) for text in own):
                self._metrics.facts.labels(decision="dropped_unknown_subject").inc()
                continue
            kept.append(fact)
        return kept

    def _clean_facts(self, facts: list[Fact]) -> list[Fact]:
        """Facts with clean text, invalid ones dropped (and counted)."""
        kept: list[Fact] = []
        for fact in facts:
            text = self._writes.clean(fact.text)
            if not text:
                self._metrics.facts.labels(decision="dropped_invalid").inc()
                continue
            kept.append(fact if text == fact.text else replace(fact, text=text))
        return kept

    async def _store_facts(
        self, turn: Turn, facts: list[Fact], config: ExtractionConfig
    ) -> WriteResult:
        """Judge every fact against the owner's memories *and* the rows this turn has
        decided so far, then store the turn's rows through the gateway in one batch
        (enriched, upserted and written through the cache). One store round trip and
        one corpus build per turn; a failure stores nothing (the retry starts from
        the same state)."""
        forgotten = await self._writes.forgets.since(turn.user_id)
        if forgotten is not None and forgotten >= turn.created_at:
            # The user was forgotten after this turn was accepted (another worker's
            # queue, a forget from the CLI): storing it would bring memories back.
            self._metrics.facts.labels(decision="dropped_forgotten").inc(len(facts))
            return WriteResult()
        scope = Scope(turn.user_id)
        if self._other_writers:
            # Another worker or replica may have written this owner's rows since the
            # snapshot (a stated fact to deduplicate against, one to supersede).
            corpus = await self._cache.current(scope)
        else:
            corpus = await self._cache.corpus(scope)
        facts = self._known_subjects(facts, corpus, turn.user_id)
        if not facts:
            return WriteResult()
        texts = [f.text for f in facts]
        pending = _TurnRows(corpus, turn.user_id)
        vectors = await self._vectors(turn.user_id, texts, pending)
        result = WriteResult()
        topics: dict[str, str] = {}
        merged: list[MemoryRecord] = []
        for fact, text, vector in zip(facts, texts, vectors, strict=True):
            candidates = pending.candidates(vector, config.dedup_candidates, shape(text).slot)
            if fact.about:
                # A fact about someone else restates or replaces only facts about them,
                candidates = [
                    c
                    for c in candidates
                    if not is_user_fact(c.text) and mentions(c.text, fact.about)
                ]
            elif is_user_fact(text):
                # and a fact about the user never one about someone else.
                candidates = [
                    c for c in candidates if is_user_fact(c.text) or named_subject(c.text) is None
                ]
            judgement = await self._judge.judge(text, candidates, config)
            if judgement.decision == Decision.NOOP:
                merged.extend(_merged_row(turn, fact, text, vector, judgement, pending.get))
            written = await self._apply(turn, fact, text, vector, judgement, pending.get)
            if written and fact.topic and judgement.decision != Decision.UPDATE:
                topics[written[0].id] = fact.topic  # a new row (an update keeps its home)
            pending.put(written)
            result = result.counted(judgement.decision)
        await self._writes.store(turn.user_id, pending.rows(), self._enricher, topics)
        if merged:  # the dropped wordings, as the history of what they duplicate
            await self._writes.put(merged)
        return result

    async def _vectors(
        self, owner: str, texts: list[str], pending: _TurnRows
    ) -> list[npt.NDArray[np.float32]]:
        """The vectors of ``texts``: a text the owner's active memory already says
        word for word (a restated fact) takes that memory's
        vector; the others are embedded, in one call."""
        vectors: list[npt.NDArray[np.float32] | None] = [
            pending.stored_vector(memory_id(owner, text), text) for text in texts
        ]
        missing = [i for i, vector in enumerate(vectors) if vector is None]
        if missing:
            fresh = await self._embedder.embed([embedding_text(texts[i]) for i in missing])
            for i, vector in zip(missing, fresh, strict=True):
                vectors[i] = vector
        return [v for v in vectors if v is not None]

    async def _apply(
        self,
        turn: Turn,
        fact: Fact,
        text: str,
        vector: npt.NDArray[np.float32],
        judgement: Judgement,
        lookup: Callable[[str], MemoryRecord | None],
    ) -> list[MemoryRecord]:
        """The rows ``judgement`` writes (the new one first)."""
        target = lookup(judgement.target) if judgement.target else None
        if judgement.decision == Decision.NOOP:
            return []
        if judgement.decision == Decision.UPDATE and target is not None:
            merged = self._writes.clean(judgement.text or text) or text
            embedding = (
                vector
                if merged == text
                else (await self._embedder.embed([embedding_text(merged)]))[0]
            )
            return [
                target.with_changes(
                    content=merged,
                    embedding=as_vector(embedding),
                    abstract="",
                    overview="",
                    content_hash=content_hash(merged),
                    updated_at=turn.created_at,
                    confidence=max(target.confidence, fact.confidence),
                    importance=max(target.importance, fact.importance),
                )
            ]
        record = _fact_row(turn, fact, text, vector, updated_at=turn.created_at)
        if judgement.decision == Decision.SUPERSEDE and target is not None:
            # Never a blind delete: the old memory stays, marked, out of retrieval.
            old = target.with_changes(
                status=Status.SUPERSEDED, superseded_by=record.id, updated_at=turn.created_at
            )
            return [record.with_changes(related_ids=(target.id,)), old]
        return [record]


def _merged_row(
    turn: Turn,
    fact: Fact,
    text: str,
    vector: npt.NDArray[np.float32],
    judgement: Judgement,
    lookup: Callable[[str], MemoryRecord | None],
) -> list[MemoryRecord]:
    """A fact judged a duplicate of ``judgement.target``, kept as a ``merged`` row of
    that memory's history (so nothing disappears silently): nothing when its text
    is the target's own or another memory of the owner's."""
    rid = memory_id(turn.user_id, text)
    if judgement.target is None or rid == judgement.target:
        return []
    existing = lookup(rid)
    if existing is not None and existing.status != Status.MERGED:
        return []
    return [
        _fact_row(
            turn,
            fact,
            text,
            vector,
            updated_at=max(now_ms(), turn.created_at),
            status=Status.MERGED,
            superseded_by=judgement.target,
        )
    ]


def _fact_row(
    turn: Turn,
    fact: Fact,
    text: str,
    vector: npt.NDArray[np.float32],
    *,
    updated_at: int,
    status: Status = Status.ACTIVE,
    superseded_by: str = "",
) -> MemoryRecord:
    """The stored row of ``fact`` as worded by ``text`` (its id is the owner's and
    the text's)."""
    return MemoryRecord(
        id=memory_id(turn.user_id, text),
        user_id=turn.user_id,
        content=text,
        embedding=as_vector(vector),
        memory_type=fact.memory_type,
        status=status,
        superseded_by=superseded_by,
        source=fact.source,
        session_id=turn.session_id,
        importance=fact.importance,
        confidence=fact.confidence,
        created_at=turn.created_at,
        updated_at=updated_at,
        content_hash=content_hash(text),
    )


class _TurnRows:
    """The rows one turn writes, over the owner's corpus snapshot: dedup candidates
    come from both (a row this turn changed replaces its stored version), so facts
    of one turn are judged against each other exactly as if each had been stored
    before the next was judged."""

    def __init__(self, corpus: Corpus, owner: str) -> None:
        self._corpus = corpus
        self._owner = owner
        # The owner's private rows: a turn never changes (merges into, supersedes) a
        # memory shared with others, which only a token allowed to share may edit.
        self._mine = np.asarray(
            [r.user_id == owner and r.visibility == Visibility.USER for r in corpus.records],
            dtype=bool,
        )
        self._rows: dict[str, MemoryRecord] = {}  # id -> latest version, in write order

    def get(self, memory_id: str) -> MemoryRecord | None:
        found = self._rows.get(memory_id)
        if found is not None:
            return found
        index = self._corpus.index_of.get(memory_id)
        return self._corpus.records[index] if index is not None else None

    def stored_vector(self, memory_id: str, text: str) -> npt.NDArray[np.float32] | None:
        """The vector of the snapshot's active memory ``memory_id`` when it says
        ``text`` (None otherwise)."""
        index = self._corpus.index_of.get(memory_id)
        if index is None or not self._mine[index]:
            return None
        record = self._corpus.records[index]
        if record.status != Status.ACTIVE or record.content != text:
            return None
        vector: npt.NDArray[np.float32] = self._corpus.vectors[index]
        return vector

    def put(self, rows: list[MemoryRecord]) -> None:
        for row in rows:
            self._rows[row.id] = row
            index = self._corpus.index_of.get(row.id)
            if index is not None:
                self._mine[index] = False  # the turn's version replaces the snapshot's

    def rows(self) -> list[MemoryRecord]:
        return list(self._rows.values())

    def candidates(
        self, vector: npt.NDArray[np.float32], limit: int, slot: str | None = None
    ) -> list[Candidate]:
        """The owner's active memories most similar to ``vector`` (best first; ties
        by position: the snapshot in corpus order, then this turn's rows), then those
        that set ``slot`` whatever their similarity."""
        extra = [
            r
            for r in self._rows.values()
            if r.status == Status.ACTIVE and r.embedding is not None and r.user_id == self._owner
        ]
        records = [*self._corpus.records, *extra]
        if not records:
            return []
        parts = [self._corpus.vectors @ vector] if self._corpus.size else []
        if extra:
            parts.append(np.asarray([r.embedding for r in extra], dtype=np.float32) @ vector)
        similarity = np.concatenate(parts)
        mask = np.concatenate([self._mine, np.ones(len(extra), dtype=bool)])
        chosen = list(top_indices(similarity, limit, mask))
        if slot is not None:
            taken = set(chosen)
            same = [
                int(i)
                for i in np.flatnonzero(mask)
                if int(i) not in taken and slot_of(records[int(i)].content) == slot
            ]
            chosen.extend(sorted(same, key=lambda i: (-similarity[i], i)))
        return [Candidate(records[i].id, records[i].content, float(similarity[i])) for i in chosen]


def _relates(text: str) -> bool:
    """A fact about one of the user's relations ("User's sister is Ana.", "User's
    dog is called Biscuit."): the names in it are people and things in the user's
    life."""
    return text.startswith(("User's ", "User’s "))
