"""Retrieval quality floors of the ``default`` strategy on the shared evaluation sets.

The datasets live outside the repository (``../shared/data``, see its FORMAT.md);
without them these tests are skipped. Each run uses the built-in configuration —
what the request path does, evidence gate included — through ``sidecar eval``'s
runner, with ``dense`` and ``bm25`` measured alongside for reference.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.config import SidecarConfig
from sidecar.evaluation.dataset import load_dataset
from sidecar.evaluation.runner import EvalOptions, EvalResult, metric_value, run_eval
from sidecar.memory.embedding.protocol import Embedder

DATA = Path(__file__).parents[2].parent / "shared" / "data"
STRATEGIES = ("dense", "bm25", "default")


async def evaluate(
    name: str, config: SidecarConfig, embedder: Embedder, *, oracle_topics: bool = False
) -> EvalResult:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"evaluation data not found: {path} (the shared data sets are not checked in)")
    result = await run_eval(
        load_dataset(path),
        config,
        EvalOptions(strategies=STRATEGIES, oracle_topics=oracle_topics),
        embedder=embedder,
    )
    assert result.violations == 0
    return result


def numbers(result: EvalResult, metric: str) -> str:
    return ", ".join(f"{s.name} {metric_value(s.overall, metric):.3f}" for s in result.strategies)


#: Issue B's floors: clusters30 precision@5 >= 0.90 and gosource117 recall@10 >= 0.60,
#: with the sets' topic labels (``cluster``) filed as named topics (``--oracle-topics``,
#: as a perfect topic-labelling LLM would file them): they hold the named-topic stage
#: to what it can do, an upper bound. The product's own figures (labels ignored, the
#: default) stay at MiniLM's ``dense`` level; those runs hold the measured level.
MEASURED_CLUSTERS30_P5_NO_TOPICS = 0.70
MEASURED_GOSOURCE117_R10_NO_TOPICS = 0.48


async def test_clusters30_precision_at_5_with_oracle_topics(
    config: SidecarConfig, embedder: Embedder
) -> None:
    result = await evaluate("clusters30.json", config, embedder, oracle_topics=True)
    precision = result.strategy("default").overall.precision[5]
    assert precision >= 0.90, (
        f"clusters30 precision@5 of default is {precision:.3f}, floor 0.90 "
        f"(precision@5: {numbers(result, 'precision@5')})"
    )


async def test_clusters30_without_topics_holds_the_dense_level(
    config: SidecarConfig, embedder: Embedder
) -> None:
    result = await evaluate("clusters30.json", config, embedder)
    precision = result.strategy("default").overall.precision[5]
    assert precision >= MEASURED_CLUSTERS30_P5_NO_TOPICS - 1e-9, numbers(result, "precision@5")
    # Within one memory of dense: with 6 queries one memory is 1/30 of precision@5.
    # In a fresh install on 2026-11-25 dense, dense-milvus and the embedding-free
    # ngram each moved by one memory while default stayed at 0.700 (dense 0.733
    # with the torch, onnx and onnx-int8 backends alike; older tokenizers,
    # sentence-transformers, numpy and scikit-learn changed nothing).
    dense = result.strategy("dense").overall
    one_memory = 1 / (5 * dense.count)
    assert precision >= dense.precision[5] - one_memory - 1e-9, numbers(result, "precision@5")


async def test_gosource117_recall_at_10_with_oracle_topics(
    config: SidecarConfig, embedder: Embedder
) -> None:
    result = await evaluate("gosource117.json", config, embedder, oracle_topics=True)
    recall = result.strategy("default").overall.recall[10]
    assert recall >= 0.60, (
        f"gosource117 recall@10 of default is {recall:.3f}, floor 0.60 "
        f"(recall@10: {numbers(result, 'recall@10')}; mrr: {numbers(result, 'mrr')})"
    )


async def test_gosource117_without_topics_holds_the_measured_level(
    config: SidecarConfig, embedder: Embedder
) -> None:
    result = await evaluate("gosource117.json", config, embedder)
    recall = result.strategy("default").overall.recall[10]
    assert recall >= MEASURED_GOSOURCE117_R10_NO_TOPICS - 1e-9, numbers(result, "recall@10")
    best = max(result.strategy(s).overall.recall[10] for s in ("dense", "bm25"))
    assert recall >= best - 1e-9


#: LoCoMo-dev, ``default``, measured 2026-11-27 with conversation context and
#: question cues: recall@10 0.787, MRR 0.612 (0.711 / 0.506 without them). The floors
#: leave a point of room for library and platform drift.
LOCOMO_DEV_R10_FLOOR = 0.77
LOCOMO_DEV_MRR_FLOOR = 0.60


async def test_locomo_beats_the_baselines(config: SidecarConfig, embedder: Embedder) -> None:
    result = await evaluate("locomo-dev.json", config, embedder)
    default = result.strategy("default").overall
    assert default.recall[10] >= LOCOMO_DEV_R10_FLOOR, numbers(result, "recall@10")
    assert default.mrr >= LOCOMO_DEV_MRR_FLOOR, numbers(result, "mrr")
    bm25 = result.strategy("bm25").by_category
    for category, scores in result.strategy("default").by_category.items():
        assert scores.recall[10] >= bm25[category].recall[10], category
    best_recall = result.baseline("recall@10")
    best_mrr = result.baseline("mrr")
    assert default.recall[10] >= best_recall.value + 0.08, (
        f"locomo-dev recall@10 of default is {default.recall[10]:.3f}, needs best baseline "
        f"({best_recall.strategy} {best_recall.value:.3f}) + 0.08 "
        f"(recall@10: {numbers(result, 'recall@10')})"
    )
    assert default.mrr >= best_mrr.value + 0.05, (
        f"locomo-dev MRR of default is {default.mrr:.3f}, needs best baseline "
        f"({best_mrr.strategy} {best_mrr.value:.3f}) + 0.05 (mrr: {numbers(result, 'mrr')})"
    )
