"""Per-query relevance signals over a corpus, their fusion, and ranking helpers.

Signals (arrays over the corpus, index ``i`` = ``corpus.records[i]``):

* ``cosine``  — embedding cosine similarity (the MiniLM scale, about -0.1..1)
* ``bm25``    — Okapi BM25 over the scope's own documents
* ``lexical`` — ``bm25`` as a share of the query's best possible BM25 score (0..1)
* ``ngram``   — character-trigram Jaccard (computed for a bounded pool only)

Fused scores are relative to the corpus (min-max or reciprocal ranks), so the
evidence gate (:func:`evidence_mask`) always uses the absolute signals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sidecar.config import HybridConfig, RetrievalConfig
from sidecar.memory.corpus.bm25 import BM25Index
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.language.text import jaccard
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.records.records import Hit
from sidecar.memory.records.vectors import top_indices

Scores = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Signals:
    cosine: Scores
    bm25: Scores
    lexical: Scores
    ngram: Scores

    def rows(self, indices: list[int]) -> list[dict[str, float]]:
        """The signals of each of ``indices``, rounded (a hit's evidence); each column
        read once, not a value at a time."""
        columns = [
            rounded(values, indices)
            for values in (self.cosine, self.bm25, self.lexical, self.ngram)
        ]
        return [
            {"cosine": c, "bm25": b, "lexical": x, "ngram": n}
            for c, b, x, n in zip(*columns, strict=True)
        ]


def rounded(values: npt.NDArray[np.floating], indices: list[int]) -> list[float]:
    """``round(values[i], 6)`` for each of ``indices``, as Python floats.

    A float32 value times 10**6 is exact in float64 (24 + 20 significant bits), so
    numpy's multiply, round-half-even and divide give what ``round`` gives, bit for
    bit, in one pass instead of a Python call per value (~0.5 µs each; a hit's
    evidence rounds a dozen). Other dtypes take ``round`` itself."""
    picked = values[indices]
    if picked.dtype == np.float32:
        exact: list[float] = picked.astype(np.float64).round(6).tolist()
        return exact
    return [round(value, 6) for value in picked.tolist()]


def cosine_scores(query: Query, corpus: Corpus) -> Scores:
    if corpus.size == 0:
        return np.zeros(0, dtype=np.float32)
    return np.asarray(corpus.vector_scores(query.vector.astype(np.float32)), dtype=np.float32)


def lexical_scores(query: Query, corpus: Corpus) -> tuple[Scores, Scores]:
    """(bm25, lexical share) for every document."""
    return index_lexical(corpus.bm25, query.tokens)


def index_lexical(index: BM25Index, terms: Sequence[str]) -> tuple[Scores, Scores]:
    """(bm25, lexical share: bm25 over the best score possible) of ``terms`` for
    every document of ``index``."""
    bm25, best = index.scored(terms)
    lexical = (bm25 / best).astype(np.float32) if best > 0 else np.zeros_like(bm25)
    return bm25, lexical


def ngram_scores(query: Query, corpus: Corpus, pool: npt.NDArray[np.int64]) -> Scores:
    """Trigram Jaccard for the ``pool`` indices (0 elsewhere)."""
    out = np.zeros(corpus.size, dtype=np.float32)
    grams = query.ngrams
    for index in pool:
        out[index] = jaccard(grams, corpus.ngrams(int(index)))
    return out


def minmax(values: Scores) -> Scores:
    if values.size == 0:
        return values
    low, high = float(values.min()), float(values.max())
    if high <= low:
        return np.zeros_like(values)
    return ((values - low) / (high - low)).astype(np.float32)


def ranks(values: Scores) -> npt.NDArray[np.float32]:
    """1-based ranks, best first, ties broken by index (deterministic)."""
    order = np.lexsort((np.arange(values.size), -values))
    out = np.empty(values.size, dtype=np.float32)
    out[order] = np.arange(1, values.size + 1, dtype=np.float32)
    return out


def compute_signals(query: Query, corpus: Corpus, config: HybridConfig) -> Signals:
    cosine = cosine_scores(query, corpus)
    bm25, lexical = lexical_scores(query, corpus)
    if config.ngram_weight > 0 and corpus.size:
        prelim = minmax(cosine) + minmax(bm25)
        pool = np.asarray(top_indices(prelim, config.ngram_pool), dtype=np.int64)
        ngram = ngram_scores(query, corpus, pool)
    else:
        ngram = np.zeros(corpus.size, dtype=np.float32)
    return Signals(cosine, bm25, lexical, ngram)


def fuse(signals: Signals, config: HybridConfig) -> Scores:
    """One score per document in 0..1 (weighted) or reciprocal-rank units (rrf)."""
    parts = [
        (config.dense_weight, signals.cosine),
        (config.bm25_weight, signals.bm25),
        (config.ngram_weight, signals.ngram),
    ]
    used = [(w, s) for w, s in parts if w > 0]
    total = sum(w for w, _ in used)
    fused = np.zeros(signals.cosine.size, dtype=np.float32)
    if config.fusion == "rrf":
        for weight, values in used:
            fused += (weight / total) / (config.rrf_k + ranks(values))
        return fused
    for weight, values in used:
        fused += (weight / total) * minmax(values)
    return fused


def evidence_mask(signals: Signals, config: RetrievalConfig) -> npt.NDArray[np.bool_]:
    """Memories with enough absolute evidence to be returned at all."""
    return gate(signals.cosine, signals.lexical, config)


def gate(cosine: Scores, lexical: Scores, config: RetrievalConfig) -> npt.NDArray[np.bool_]:
    """The evidence gate on absolute signals: a cosine of ``threshold``, a BM25 share
    of ``lexical_threshold``, or both at ``joint_gate`` of theirs."""
    joint = config.joint_gate
    mask: npt.NDArray[np.bool_] = (
        (cosine >= config.threshold)
        | (lexical >= config.lexical_threshold)
        | ((cosine >= joint * config.threshold) & (lexical >= joint * config.lexical_threshold))
    )
    return mask


def evident(cosine: float, lexical: float, config: RetrievalConfig) -> bool:
    """:func:`gate` for one memory's signals."""
    one = np.array([cosine], dtype=np.float32), np.array([lexical], dtype=np.float32)
    return bool(gate(*one, config)[0])


def make_hits(
    corpus: Corpus,
    indices: list[int],
    scores: Scores,
    signals: Signals | None = None,
    via: dict[int, str] | None = None,
    stages: Sequence[tuple[str, Scores]] = (),
) -> list[Hit]:
    """Hits for ``indices`` with their signals as evidence, then the score after each
    of ``stages`` (named, in order): the first, and every later one that changed it."""
    columns = [(name, rounded(values, indices)) for name, values in stages]
    evidences = signals.rows(indices) if signals is not None else [{} for _ in indices]
    final = scores[indices].tolist()
    records = corpus.records
    routes = via or {}
    hits = []
    for j, index in enumerate(indices):
        evidence = evidences[j]
        previous: float | None = None
        for name, column in columns:
            value = column[j]
            if value != previous:
                evidence[name] = value
            previous = value
        hits.append(Hit(records[index], final[j], evidence, routes.get(index, "direct")))
    return hits
