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
from sidecar.memory.language.absolute import absolute_dates, dated_quote
from sidecar.memory.language.addressee import name_the_assistant
from sidecar.memory.language.changes import changes
from sidecar.memory.language.embedding_text import embedding_text
from sidecar.memory.language.entities import mentions, named_subject, names_user
from sidecar.memory.language.excerpts import excerpt_of
from sidecar.memory.language.said import ASKED, QUOTED, asked_excerpt, asked_fact, said_fact
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
from sidecar.memory.write.rows.enrich import Enricher
from sidecar.memory.write.rows.gateway import WriteGateway, stored_row
from sidecar.memory.write.turns.dedup import Decision, DedupJudge, Judgement, TurnRows
from sidecar.memory.write.turns.extraction import FactExtractor
from sidecar.memory.write.turns.placement import AttributePlacer
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RowWritten:
    """What a memory written from outside a turn became (:meth:`MemoryWriter.write_row`):
    ``row`` is the memory that now holds the fact — the new one, the one it updated
    or the one it restates — and ``replaced`` the memory it superseded."""

    decision: Decision
    row: MemoryRecord
    replaced: MemoryRecord | None = None


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
        #: Changes told as events supersede by the attribute their words fall in.
        self._placer = AttributePlacer(embedder)
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
        extracted = self._addressed(await self._extractor.extract(turn, config))
        # "last month" said in May 2023 is stored as "in April 2023": never stale.
        facts = self._clean_facts(
            [_dated(f, absolute_dates(f.text, turn.created_at)) for f in extracted]
        )
        if not facts:
            facts = self._fallback_facts(turn, config)
        if not facts:
            self._metrics.turns_without_memory.inc()
            return WriteResult()
        async with self._writes.lock(turn.user_id):
            return await self._store_facts(turn, facts, config)

    async def write_row(
        self, record: MemoryRecord, *, topic: str | None = None, edited: bool = False
    ) -> RowWritten:
        """``record`` — a memory from the admin API, the CLI or an import, embedded —
        through the decision a turn's fact takes: judged against the owner's private
        memories, a restatement is a no-op (nothing is stored; ``row`` is the memory
        it restates), a richer wording updates that memory, another value of the same
        attribute supersedes the old memory (kept, marked, out of retrieval), and
        anything else is added. ``edited``: ``record`` is an existing memory with new
        text, stored as it is, and the memory it supersedes (if any) is marked. A
        memory shared beyond its owner is stored as it is: a turn never changes
        shared memories either. The caller holds the owner's lock."""
        owner, text, vector = record.user_id, record.content, record.embedding
        topics = {record.id: topic} if topic else None
        if record.visibility != Visibility.USER or vector is None or record.source in QUOTED:
            stored = await self._writes.store(owner, [record], self._enricher, topics)
            return RowWritten(Decision.ADD, stored_row(stored, record.id))
        config = self._extraction_config("")
        scope = Scope(owner)
        if self._other_writers:
            corpus = await self._cache.current(scope)
        else:
            corpus = await self._cache.corpus(scope)
        pending = TurnRows(corpus, owner)
        about = "" if names_user(text) else (named_subject(text) or "")
        candidates = [
            c
            for c in pending.candidates_for(
                text, about, np.asarray(vector, dtype=np.float32), config.dedup_candidates + 1
            )
            if c.id != record.id
        ][: config.dedup_candidates]
        judgement = await self._judge.judge(text, candidates, config)
        target = pending.get(judgement.target) if judgement.target else None
        now = max(now_ms(), record.updated_at)
        if judgement.decision == Decision.SUPERSEDE and target is not None:
            rows = _superseding(record, target, now)
            stored = await self._writes.store(owner, rows, self._enricher, topics)
            return RowWritten(Decision.SUPERSEDE, stored_row(stored, record.id), rows[1])
        if edited or target is None or judgement.decision == Decision.ADD:
            stored = await self._writes.store(owner, [record], self._enricher, topics)
            decision = Decision.UPDATE if edited else Decision.ADD
            return RowWritten(decision, stored_row(stored, record.id))
        if judgement.decision == Decision.NOOP:
            return RowWritten(Decision.NOOP, target)
        updated = await self._reworded(
            target,
            judgement.text,
            text,
            np.asarray(vector, dtype=np.float32),
            at=now,
            confidence=record.confidence,
            importance=record.importance,
        )
        stored = await self._writes.store(owner, [updated], self._enricher)
        return RowWritten(Decision.UPDATE, stored_row(stored, target.id))

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

    def _fallback_facts(self, turn: Turn, config: ExtractionConfig) -> list[Fact]:
        """What a turn leaves when no fact of it is kept (:func:`_fallback`): a quote
        keeps its words, the dates they mean beside them."""
        return self._clean_facts(
            [replace(f, text=dated_quote(f.text, turn.created_at)) for f in _fallback(turn, config)]
        )

    def _addressed(self, facts: list[Fact]) -> list[Fact]:
        """The facts with the assistant named where they say "you" (a generic "you"
        is "one"), less the replies and requests to it that are no fact about the
        user (counted as ``dropped_reply``; :mod:`sidecar.memory.language.addressee`)."""
        kept: list[Fact] = []
        for fact in facts:
            if fact.source in QUOTED:
                kept.append(fact)  # the user's own words, quoted
                continue
            text = name_the_assistant(fact.text)
            if text is None:
                self._metrics.facts.labels(decision="dropped_reply").inc()
            elif text == fact.text:
                kept.append(fact)
            else:
                kept.append(replace(fact, text=text))
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
        extracted, facts = facts, self._known_subjects(facts, corpus, turn.user_id)
        if not facts and not any(f.source in QUOTED for f in extracted):
            # Nothing of the turn is kept after all: what was said still is.
            facts = self._fallback_facts(turn, config)
        if not facts:
            self._metrics.turns_without_memory.inc()
            return WriteResult()
        texts = [f.text for f in facts]
        pending = TurnRows(corpus, turn.user_id)
        vectors = await self._vectors(turn.user_id, texts, pending)
        result = WriteResult()
        topics: dict[str, str] = {}
        merged: list[MemoryRecord] = []
        for fact, text, vector in zip(facts, texts, vectors, strict=True):
            excerpt = (
                asked_excerpt(turn.user_text, turn.assistant_text)
                if fact.source == ASKED
                else excerpt_of(turn.user_text, text)
            )
            stated = _Stated(turn, fact, text, vector, excerpt)
            if fact.source in QUOTED:
                judgement = pending.same_quote(text)
            else:
                judged = fact.as_said or text
                candidates = pending.candidates_for(
                    judged, fact.about, vector, config.dedup_candidates
                )
                judgement = await self._judge.judge(judged, candidates, config)
                if judgement.text == judged:
                    judgement = replace(judgement, text=text)
                if judgement.decision == Decision.ADD:
                    judgement = await self._placed_change(judged, vector, pending, config)
            if judgement.decision == Decision.NOOP:
                merged.extend(stated.merged_row(judgement, pending.get))
                pending.put(stated.restated(judgement, pending.get))
            written = await self._apply(stated, judgement, pending.get)
            if written and fact.topic and judgement.decision != Decision.UPDATE:
                topics[written[0].id] = fact.topic  # a new row (an update keeps its home)
            pending.put(written)
            result = result.counted(judgement.decision)
        await self._writes.store(turn.user_id, pending.rows(), self._enricher, topics)
        if merged:  # the dropped wordings, as the history of what they duplicate
            await self._writes.put(merged)
        return result

    async def _placed_change(
        self,
        text: str,
        vector: npt.NDArray[np.float32],
        pending: TurnRows,
        config: ExtractionConfig,
    ) -> Judgement:
        """A fact the judge adds, unless it tells a change of an attribute one of the
        owner's memories holds (:mod:`~sidecar.memory.write.turns.placement`): then it
        supersedes that memory."""
        if config.placement_candidates == 0 or not names_user(text) or not changes(text):
            # A fact about someone else changes none of User's; most facts change nothing.
            return Judgement(Decision.ADD)
        near = pending.candidates(vector, config.placement_candidates)
        mine = [r for c in near if (r := pending.get(c.id)) is not None and r.embedding]
        target = await self._placer.superseded(
            text,
            vector,
            mine,
            min_score=config.placement_min_score,
            margin=config.placement_margin,
        )
        if target is None:
            return Judgement(Decision.ADD)
        self._metrics.facts.labels(decision="supersede_placed").inc()
        return Judgement(Decision.SUPERSEDE, target.id, by="placed")

    async def _vectors(
        self, owner: str, texts: list[str], pending: TurnRows
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
        stated: _Stated,
        judgement: Judgement,
        lookup: Callable[[str], MemoryRecord | None],
    ) -> list[MemoryRecord]:
        """The rows ``judgement`` writes (the new one first)."""
        turn, fact, text, vector = stated.turn, stated.fact, stated.text, stated.vector
        target = lookup(judgement.target) if judgement.target else None
        if judgement.decision == Decision.NOOP:
            return []
        if judgement.decision == Decision.UPDATE and target is not None:
            said = target.said_in((turn.origin(),), stated.excerpt)
            return [
                await self._reworded(
                    said,
                    judgement.text,
                    text,
                    vector,
                    at=turn.created_at,
                    confidence=fact.confidence,
                    importance=fact.importance,
                )
            ]
        record = stated.row(updated_at=turn.created_at)
        if judgement.decision == Decision.SUPERSEDE and target is not None:
            return _superseding(record, target, turn.created_at)
        return [record]

    async def _reworded(
        self,
        target: MemoryRecord,
        wording: str | None,
        text: str,
        vector: npt.NDArray[np.float32],
        *,
        at: int,
        confidence: float,
        importance: float,
    ) -> MemoryRecord:
        """``target`` updated to the richer wording the judge chose (``wording``, else
        the fact's ``text``): embedded again unless that is ``text`` (whose vector is
        ``vector``), its derived abstract and overview left to the enricher, the
        higher confidence and importance kept."""
        merged = self._writes.clean(wording or text) or text
        embedding = (
            vector if merged == text else (await self._embedder.embed([embedding_text(merged)]))[0]
        )
        return target.with_changes(
            content=merged,
            embedding=as_vector(embedding),
            abstract="",
            overview="",
            content_hash=content_hash(merged),
            updated_at=at,
            confidence=max(target.confidence, confidence),
            importance=max(target.importance, importance),
        )


@dataclass(frozen=True, slots=True)
class _Stated:
    """One fact of a turn, as it will be stored: the turn it came from, the fact, its
    clean text, its vector and what of the turn carries it."""

    turn: Turn
    fact: Fact
    text: str
    vector: npt.NDArray[np.float32]
    excerpt: str

    def row(
        self, *, updated_at: int, status: Status = Status.ACTIVE, superseded_by: str = ""
    ) -> MemoryRecord:
        """The stored row of the fact as worded by ``text`` (its id is the owner's and
        the text's)."""
        turn, fact = self.turn, self.fact
        return MemoryRecord(
            id=memory_id(turn.user_id, self.text),
            user_id=turn.user_id,
            content=self.text,
            embedding=as_vector(self.vector),
            memory_type=fact.memory_type,
            status=status,
            superseded_by=superseded_by,
            source=fact.source,
            session_id=turn.session_id,
            importance=fact.importance,
            confidence=fact.confidence,
            created_at=turn.created_at,
            updated_at=updated_at,
            content_hash=content_hash(self.text),
            excerpt=self.excerpt,
            origins=(turn.origin(),),
        )

    def restated(
        self, judgement: Judgement, lookup: Callable[[str], MemoryRecord | None]
    ) -> list[MemoryRecord]:
        """The memory this fact restates (``judgement.target``, a no-op), now said in
        this turn too: its origins and excerpt grow (nothing when it is not the
        owner's own active memory, or already knows this turn)."""
        target = lookup(judgement.target) if judgement.target else None
        if (
            target is None
            or target.user_id != self.turn.user_id
            or target.status != Status.ACTIVE
            or target.embedding is None
        ):
            return []
        grown = target.said_in((self.turn.origin(),), self.excerpt)
        return [] if grown is target else [grown]

    def merged_row(
        self, judgement: Judgement, lookup: Callable[[str], MemoryRecord | None]
    ) -> list[MemoryRecord]:
        """The fact judged a duplicate of ``judgement.target``, kept as a ``merged`` row
        of that memory's history (so nothing disappears silently): nothing when its
        text is the target's own or another memory of the owner's."""
        rid = memory_id(self.turn.user_id, self.text)
        if judgement.target is None or rid == judgement.target:
            return []
        existing = lookup(rid)
        if existing is not None and existing.status != Status.MERGED:
            return []
        updated_at = max(now_ms(), self.turn.created_at)
        return [
            self.row(updated_at=updated_at, status=Status.MERGED, superseded_by=judgement.target)
        ]


def _superseding(new: MemoryRecord, old: MemoryRecord, at: int) -> list[MemoryRecord]:
    """``new`` linked to the memory it replaces, and ``old`` marked superseded by it:
    never a blind delete, the old memory stays, out of retrieval."""
    return [
        new.with_changes(related_ids=(*new.related_ids, old.id)),
        old.with_changes(status=Status.SUPERSEDED, superseded_by=new.id, updated_at=at),
    ]


def _dated(fact: Fact, text: str) -> Fact:
    """``fact`` stored as ``text`` (its dates absolute), judged as said."""
    return fact if text == fact.text else replace(fact, text=text, as_said=fact.text)


def _fallback(turn: Turn, config: ExtractionConfig) -> list[Fact]:
    """What a turn the extractor kept nothing from leaves: the user's statements,
    quoted, else a request answered at length (:mod:`sidecar.memory.language.said`)."""
    said = said_fact(turn.user_text) if config.keep_statements else None
    if said is not None:
        return [said]
    if config.keep_answers:
        asked = asked_fact(
            turn.user_text, turn.assistant_text, min_reply_chars=config.answer_min_chars
        )
        if asked is not None:
            return [asked]
    return []


def _relates(text: str) -> bool:
    """A fact about one of the user's relations ("User's sister is Ana.", "User's
    dog is called Biscuit."): the names in it are people and things in the user's
    life."""
    return text.startswith(("User's ", "User’s "))
