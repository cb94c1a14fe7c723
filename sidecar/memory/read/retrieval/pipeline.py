"""Corpus-scored strategies: one pipeline, configured per strategy name.

    signals -> base score (cosine | bm25 | ngram | fused)
            -> conversation context, question cues, session lift (optional)
            -> named-topic propagation (optional)
            -> link expansion (optional)
            -> associative expansion (optional; ``config`` = per profile)
            -> evidence gate -> candidate pool -> link share limit
            -> composite re-rank (optional) -> top-k

All of it runs on the scope's in-memory corpus, so no strategy can see a memory
outside the scope, and results are deterministic for the same corpus and query.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Literal

import numpy as np
import numpy.typing as npt

from sidecar.config import HybridConfig, RetrievalConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.read.retrieval.associative import expand_associative
from sidecar.memory.read.retrieval.base import Query, SearchSpace, Stage
from sidecar.memory.read.retrieval.conversation import in_context, lift_sessions, prepare_context
from sidecar.memory.read.retrieval.cues import lift_cues, prepare_cues
from sidecar.memory.read.retrieval.links import expand_links, limit_link_share, prepare_links
from sidecar.memory.read.retrieval.per_corpus import PerCorpus
from sidecar.memory.read.retrieval.rerank import composite
from sidecar.memory.read.retrieval.signals import (
    Scores,
    Signals,
    compute_signals,
    evidence_mask,
    fuse,
    make_hits,
    ngram_scores,
)
from sidecar.memory.read.retrieval.topics import TopicGroups, expand_topics
from sidecar.memory.records.records import Hit
from sidecar.memory.records.vectors import top_indices

BaseSignal = Literal["cosine", "bm25", "ngram", "fused"]
Toggle = Literal["on", "off", "config"]


@dataclasses.dataclass(frozen=True, slots=True)
class Ranking:
    """The outcome of scoring a corpus: ranked indices and what produced them."""

    order: list[int]
    scores: Scores
    signals: Signals
    via: dict[int, str]
    #: The score after each stage that ran (``fused``, ``context``, ``cues``,
    #: ``session``, ``topic``, ``links``, ``rerank``): a hit's evidence names the
    #: stages that changed its score.
    stages: tuple[tuple[str, Scores], ...] = ()

    def hits(self, corpus: Corpus, top_k: int) -> list[Hit]:
        order = self.order[:top_k]
        return make_hits(corpus, order, self.scores, self.signals, self.via, self.stages)


class PipelineRetriever:
    def __init__(
        self,
        name: str,
        *,
        base: BaseSignal,
        fusion: Literal["weighted", "rrf"] | None = None,
        links: bool = False,
        associative: Toggle = "off",
        rerank: bool = False,
        topics: bool = False,
        conversation: bool = False,
    ) -> None:
        self.name = name
        self._base = base
        self._fusion = fusion
        self._links = links
        self._associative = associative
        self._rerank = rerank
        self._conversation = conversation
        self._topics = PerCorpus(TopicGroups.of) if topics else None

    def _hybrid(self, config: RetrievalConfig) -> HybridConfig:
        hybrid = config.hybrid
        if self._fusion is not None and self._fusion != hybrid.fusion:
            hybrid = hybrid.model_copy(update={"fusion": self._fusion})
        return hybrid

    def rank(
        self,
        query: Query,
        corpus: Corpus,
        config: RetrievalConfig,
        top_k: int,
        user_id: str | None = None,
    ) -> Ranking:
        """Rank ``corpus`` for ``query``; ``user_id`` (the scope's user) is whose named
        topics count (none: no topic stage)."""
        hybrid = self._hybrid(config)
        signals = compute_signals(query, corpus, hybrid if self._base == "fused" else _NO_NGRAM)
        if self._base == "cosine":
            base, gate = signals.cosine, signals.cosine >= config.threshold
        elif self._base == "bm25":
            base, gate = signals.lexical, signals.lexical >= config.lexical_threshold
        elif self._base == "ngram":
            every = np.arange(corpus.size, dtype=np.int64)
            signals = dataclasses.replace(signals, ngram=ngram_scores(query, corpus, every))
            base, gate = signals.ngram, evidence_mask(signals, config)
        else:
            base, gate = fuse(signals, hybrid), evidence_mask(signals, config)
        stages: list[tuple[str, Scores]] = [(Stage.FUSED, base)] if self._base == "fused" else []
        if self._conversation:
            base = _in_conversation(base, signals, query, corpus, config, hybrid, stages)
        if self._topics is not None and user_id is not None:
            topics = self._topics.get(corpus, user_id)
            base, gate, _ = expand_topics(base, gate, topics, config.topics)
            stages.append((Stage.TOPIC, base))
        scores: Scores = base
        via: dict[int, str] = {}
        if self._links:
            scores, via = expand_links(corpus, base, config.links, config.candidate_pool, gate)
            stages.append((Stage.LINKS, scores))
        if self._associative == "on" or (
            self._associative == "config" and config.associative.enabled
        ):
            assoc = config.associative.model_copy(update={"enabled": True})
            reached = _admit(gate, via)
            scores, via = expand_associative(corpus, scores, via, assoc, reached)
        # A memory reached through a link or association is admitted on its
        # referrer's evidence; one with evidence of its own counts as direct.
        via = {i: label for i, label in via.items() if not gate[i]}
        gate = _admit(gate, via)
        order = top_indices(scores, max(config.candidate_pool, top_k), gate)
        if self._rerank and config.rerank.enabled:
            order, scores = _rerank(order, scores, corpus, config, query.now_ms)
            stages.append((Stage.RERANK, scores))
        if via:
            order = limit_link_share(order, base, via, top_k, config.links.max_share)
        return Ranking(order, scores, signals, via, tuple(stages) if len(stages) > 1 else ())

    def prepare(
        self, corpus: Corpus, config: RetrievalConfig, user_id: str | None = None
    ) -> Iterator[None]:
        """Make what :meth:`rank` reads of ``corpus`` whatever the question (the
        conversation context, the cue columns, the named topics, the link table), a
        step at a time: the corpus cache readies a new snapshot so, off the request
        path (:mod:`~sidecar.memory.corpus.warming`), and the first question asked
        of it costs what later ones do. What depends on the question's words (their
        joined postings, the link rows a walk reads) is still made when asked."""
        if corpus.size == 0:
            return
        if self._conversation:
            if config.conversation.enabled:
                yield from prepare_context(corpus, config.conversation)
            if config.cues.enabled:
                yield from prepare_cues(corpus, config.cues)
        if self._topics is not None and user_id is not None:
            self._topics.get(corpus, user_id)
            yield
        if self._links:
            prepare_links(corpus, config.links)
            yield

    async def retrieve(self, query: Query, space: SearchSpace, top_k: int) -> list[Hit]:
        ranking = self.rank(query, space.corpus, space.config, top_k, space.scope.user_id)
        return ranking.hits(space.corpus, top_k)


_NO_NGRAM = HybridConfig(ngram_weight=0.0)


def _in_conversation(
    base: Scores,
    signals: Signals,
    query: Query,
    corpus: Corpus,
    config: RetrievalConfig,
    hybrid: HybridConfig,
    stages: list[tuple[str, Scores]],
) -> Scores:
    """The conversation and cue stages (each recorded in ``stages`` when it ran)."""
    talk = config.conversation
    if talk.enabled:
        base = in_context(base, signals, query, corpus, talk, hybrid)
        stages.append((Stage.CONTEXT, base))
    if config.cues.enabled:
        base = lift_cues(base, query, corpus, config.cues, query.now_ms)
        stages.append((Stage.CUES, base))
    if talk.enabled and talk.session_lift > 0:
        base = lift_sessions(base, corpus, talk)
        stages.append((Stage.SESSION, base))
    return base


def _admit(gate: npt.NDArray[np.bool_], via: dict[int, str]) -> npt.NDArray[np.bool_]:
    """``gate`` with every memory in ``via`` admitted too."""
    admitted = gate.copy()
    if via:
        admitted[np.fromiter(via, dtype=np.intp, count=len(via))] = True
    return admitted


def _rerank(
    order: list[int], scores: Scores, corpus: Corpus, config: RetrievalConfig, now: int
) -> tuple[list[int], Scores]:
    pool = order[: config.rerank.pool]
    if not pool:
        return order, scores
    similarities = scores[pool].tolist()
    top = max(similarities) or 1.0
    records, rerank = corpus.records, config.rerank
    final = np.asarray(
        [
            composite(value / top, records[index], rerank, now)
            for value, index in zip(similarities, pool, strict=True)
        ],
        dtype=np.float32,
    )
    reranked = scores.copy()
    reranked[pool] = final
    by_final = final.tolist()
    head = [pool[j] for j in sorted(range(len(pool)), key=lambda j: (-by_final[j], pool[j]))]
    return head + order[len(pool) :], reranked
