"""Ranking metrics, per query then averaged (FORMAT.md).

* ``recall@k``    = |relevant ∩ top-k| / |relevant|
* ``hit@k``       = 1 if any relevant memory is in the top k
* ``precision@k`` = |relevant ∩ top-k| / k — the denominator is k, never the number
  of memories returned (a strategy that returns fewer is not rewarded for it)
* ``mrr``         = 1 / rank of the first relevant memory, 0 if none in the top 50
* ``ndcg@k``      binary gains: DCG = Σ_{rank r ≤ k, relevant} 1 / log2(r + 1),
  divided by the DCG of the ideal ranking (min(k, |relevant|) relevant first)
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

#: MRR looks this deep for the first relevant memory.
MRR_DEPTH = 50


def _top(ranked: Sequence[str], k: int) -> list[str]:
    return list(dict.fromkeys(ranked))[:k]


def recall_at(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    if not relevant:
        return 0.0
    found = sum(1 for item in _top(ranked, k) if item in relevant)
    return found / len(set(relevant))


def hit_at(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    return 1.0 if any(item in relevant for item in _top(ranked, k)) else 0.0


def precision_at(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    if k <= 0:
        raise ValueError("k must be positive")
    return sum(1 for item in _top(ranked, k) if item in relevant) / k


def reciprocal_rank(
    ranked: Sequence[str], relevant: Collection[str], depth: int = MRR_DEPTH
) -> float:
    for rank, item in enumerate(_top(ranked, depth), start=1):
        if item in relevant:
            return 1.0 / rank
    return 0.0


def ndcg_at(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    ideal_count = min(k, len(set(relevant)))
    if ideal_count == 0:
        return 0.0
    dcg = sum(
        1.0 / math.log2(rank + 1)
        for rank, item in enumerate(_top(ranked, k), start=1)
        if item in relevant
    )
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, ideal_count + 1))
    return dcg / ideal


@dataclass(frozen=True, slots=True)
class Scores:
    """One query's metrics, or their mean over several queries (``count`` of them)."""

    recall: Mapping[int, float]
    hit: Mapping[int, float]
    precision: Mapping[int, float]
    ndcg: Mapping[int, float]
    mrr: float
    count: int = 1

    def as_dict(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {"queries": self.count}
        for name, values in (
            ("recall", self.recall),
            ("hit", self.hit),
            ("precision", self.precision),
            ("ndcg", self.ndcg),
        ):
            for k, value in sorted(values.items()):
                out[f"{name}@{k}"] = value
        out["mrr"] = self.mrr
        return out


def score_query(ranked: Sequence[str], relevant: Collection[str], ks: Sequence[int]) -> Scores:
    """The metrics of one ranked list of memory ids (best first)."""
    wanted = set(relevant)
    return Scores(
        recall={k: recall_at(ranked, wanted, k) for k in ks},
        hit={k: hit_at(ranked, wanted, k) for k in ks},
        precision={k: precision_at(ranked, wanted, k) for k in ks},
        ndcg={k: ndcg_at(ranked, wanted, k) for k in ks},
        mrr=reciprocal_rank(ranked, wanted),
    )


def mean_scores(scores: Sequence[Scores], ks: Sequence[int]) -> Scores:
    """The per-query mean of ``scores`` (all zeros for none)."""
    n = len(scores)

    def mean(values: Sequence[float]) -> float:
        return math.fsum(values) / n if n else 0.0

    return Scores(
        recall={k: mean([s.recall[k] for s in scores]) for k in ks},
        hit={k: mean([s.hit[k] for s in scores]) for k in ks},
        precision={k: mean([s.precision[k] for s in scores]) for k in ks},
        ndcg={k: mean([s.ndcg[k] for s in scores]) for k in ks},
        mrr=mean([s.mrr for s in scores]),
        count=n,
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]
