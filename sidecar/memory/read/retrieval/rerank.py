"""Composite re-ranking: similarity blended with salience and confidence.

    final = w_sim * similarity + w_sal * salience + w_conf * confidence
    salience = (w_imp * importance + w_acc * access + w_rec * recency) / sum(w)
    access   = log1p(access_count) / log1p(100), capped at 1
    recency  = 0.5 ** (age_days / half_life_days), age from the last update

Only the best ``pool`` candidates by similarity are re-ranked, so salience orders
relevant memories and never lifts an irrelevant one above them. Superseded
memories never reach this point: the corpus holds active memories only.
"""

from __future__ import annotations

import math

from sidecar.config import RerankConfig
from sidecar.memory.records.records import MemoryRecord

MS_PER_DAY = 86_400_000
_LOG1P_100 = math.log1p(100)


def salience(record: MemoryRecord, config: RerankConfig, now_ms: int) -> float:
    total = config.importance_weight + config.access_weight + config.recency_weight
    if total <= 0:
        return 0.0
    access = min(1.0, math.log1p(max(0, record.access_count)) / _LOG1P_100)
    when = record.updated_at or record.created_at
    age_days = max(0.0, (now_ms - when) / MS_PER_DAY) if when > 0 else float("inf")
    recency: float = 0.5 ** (age_days / config.recency_half_life_days)
    importance = min(1.0, max(0.0, record.importance))
    return (
        config.importance_weight * importance
        + config.access_weight * access
        + config.recency_weight * recency
    ) / total


def composite(similarity: float, record: MemoryRecord, config: RerankConfig, now_ms: int) -> float:
    total = config.similarity_weight + config.salience_weight + config.confidence_weight
    if total <= 0:
        return similarity
    confidence = min(1.0, max(0.0, record.confidence))
    return (
        config.similarity_weight * similarity
        + config.salience_weight * salience(record, config, now_ms)
        + config.confidence_weight * confidence
    ) / total
