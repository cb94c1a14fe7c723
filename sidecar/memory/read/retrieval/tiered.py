"""``tiered``: progressive search abstract (L0) -> overview (L1) -> content (L2).

Each tier scores every memory of the corpus by the memory's embedding cosine and
BM25 over that tier's text (the one-line abstract, the short overview, the full
content), fused like ``hybrid`` (at L2 it *is* ``hybrid``, n-grams included). The
abstract and overview BM25 indexes are built once per corpus snapshot and kept
(a few, least recently used dropped).

A tier is *sufficient* when its best ``tiered.min_results`` results (after the
evidence gate) have a mean absolute score of at least ``tiered.min_avg_score``,
where the absolute score is the weighted mean of cosine and the lexical share
(BM25 over the query's best possible BM25, 0..1) — fused scores are relative to
the corpus, so they cannot say "good enough". The first sufficient tier answers;
otherwise the next tier is searched, and the last one answers whatever it finds.
:class:`TierStats` (and every hit's ``tiers`` and ``stop_<reason>`` signals) says
how many tiers ran and why it stopped: ``sufficient`` or ``last_tier``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sidecar.config import HybridConfig, RetrievalConfig
from sidecar.memory.corpus.bm25 import BM25Index
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.language.text import tokens
from sidecar.memory.read.retrieval.base import Query, SearchSpace, Stage
from sidecar.memory.read.retrieval.signals import (
    Scores,
    Signals,
    compute_signals,
    cosine_scores,
    evidence_mask,
    fuse,
    index_lexical,
)
from sidecar.memory.records.records import Hit
from sidecar.memory.records.vectors import top_indices

TIERS: tuple[str, ...] = ("abstract", "overview", "content")
_KEEP_INDEXES = 8


@dataclass(frozen=True, slots=True)
class TierStats:
    tiers: int  # tiers searched
    tier: str  # the tier that answered
    stop: str  # sufficient | last_tier
    mean_score: float  # the answering tier's mean absolute score of its best results

    def signals(self) -> dict[str, float]:
        return {
            "tiers": float(self.tiers),
            "tier_mean": round(self.mean_score, 6),
            f"stop_{self.stop}": 1.0,
        }


class TieredRetriever:
    name = "tiered"

    def __init__(self) -> None:
        #: id(corpus) -> (corpus, abstract index, overview index); the corpus is kept
        #: with its indexes so the id cannot be reused while the entry lives.
        self._indexes: OrderedDict[int, tuple[Corpus, BM25Index, BM25Index]] = OrderedDict()

    def _tier_indexes(self, corpus: Corpus) -> tuple[BM25Index, BM25Index]:
        key = id(corpus)
        found = self._indexes.get(key)
        if found is not None and found[0] is corpus:
            self._indexes.move_to_end(key)
            return found[1], found[2]
        abstracts = BM25Index([tokens(r.abstract or r.content) for r in corpus.records])
        overviews = BM25Index([tokens(r.overview or r.content) for r in corpus.records])
        self._indexes[key] = (corpus, abstracts, overviews)
        while len(self._indexes) > _KEEP_INDEXES:
            self._indexes.popitem(last=False)
        return abstracts, overviews

    def search(
        self, query: Query, corpus: Corpus, config: RetrievalConfig, top_k: int
    ) -> tuple[list[Hit], TierStats]:
        if corpus.size == 0:
            return [], TierStats(0, TIERS[0], "last_tier", 0.0)
        tiered, hybrid = config.tiered, config.hybrid
        cosine = cosine_scores(query, corpus)
        indexes = self._tier_indexes(corpus)
        terms = query.tokens
        for depth, tier in enumerate(TIERS, start=1):
            if tier == "content":
                signals = compute_signals(query, corpus, hybrid)
                fused = fuse(signals, hybrid)
            else:
                index = indexes[0] if tier == "abstract" else indexes[1]
                bm25, lexical = index_lexical(index, terms)
                zeros = np.zeros(corpus.size, dtype=np.float32)
                signals = Signals(cosine, bm25, lexical, zeros)
                fused = fuse(signals, hybrid.model_copy(update={"ngram_weight": 0.0}))
            gate = evidence_mask(signals, config)
            order = top_indices(fused, top_k, gate)
            absolute = _absolute(signals, hybrid)
            head = order[: tiered.min_results]
            mean = float(np.mean(absolute[head])) if head else 0.0
            sufficient = len(head) >= tiered.min_results and mean >= tiered.min_avg_score
            if sufficient or depth == len(TIERS):
                stats = TierStats(depth, tier, "sufficient" if sufficient else "last_tier", mean)
                return _hits(corpus, order, fused, signals, stats), stats
        raise AssertionError("unreachable: the last tier always answers")

    async def retrieve(self, query: Query, space: SearchSpace, top_k: int) -> list[Hit]:
        hits, _ = self.search(query, space.corpus, space.config, top_k)
        return hits


def _absolute(signals: Signals, hybrid: HybridConfig) -> npt.NDArray[np.float32]:
    """Weighted mean of cosine and the lexical share: comparable across corpora."""
    total = hybrid.dense_weight + hybrid.bm25_weight
    if total <= 0:
        return signals.cosine
    return np.asarray(
        (hybrid.dense_weight * signals.cosine + hybrid.bm25_weight * signals.lexical) / total,
        dtype=np.float32,
    )


def _hits(
    corpus: Corpus, order: list[int], fused: Scores, signals: Signals, stats: TierStats
) -> list[Hit]:
    extra = stats.signals()
    return [
        Hit(
            corpus.records[i],
            float(fused[i]),
            {**evidence, Stage.FUSED: round(float(fused[i]), 6), **extra},
        )
        for i, evidence in zip(order, signals.rows(order), strict=True)
    ]
