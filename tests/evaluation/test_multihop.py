"""Multi-hop over facts (``tests/data/multihop.json``, written for this project):
"where does my sister live?" needs "User's sister is Ana." and "Ana lives in Porto."
among look-alikes ("Marco lives in Porto."). Entity links and bridge support must
lift the bridged queries' recall@10 by at least 15 points over ``default`` without
links, and cost the single-hop controls nothing."""

from __future__ import annotations

from pathlib import Path

from sidecar.config import SidecarConfig
from sidecar.evaluation.dataset import load_dataset
from sidecar.evaluation.runner import EvalOptions, StrategyResult, run_eval
from sidecar.memory.embedding.protocol import Embedder

DATASET = Path(__file__).parents[1] / "data" / "multihop.json"


def bridged_recall(result: StrategyResult) -> float:
    """Recall@10 over every bridged query (1- and 2-hop chains together)."""
    groups = [s for name, s in result.by_category.items() if name.startswith("bridged")]
    return sum(s.recall[10] * s.count for s in groups) / sum(s.count for s in groups)


async def run(config: SidecarConfig, embedder: Embedder) -> StrategyResult:
    result = await run_eval(
        load_dataset(DATASET), config, EvalOptions(strategies=("default",)), embedder=embedder
    )
    assert result.violations == 0
    return result.strategy("default")


async def test_links_bridge_facts_and_leave_single_hop_alone(
    config: SidecarConfig, embedder: Embedder
) -> None:
    with_links = await run(config, embedder)
    retrieval = config.defaults.retrieval
    no_links = retrieval.model_copy(
        update={"links": retrieval.links.model_copy(update={"enabled": False})}
    )
    without = await run(
        config.model_copy(
            update={"defaults": config.defaults.model_copy(update={"retrieval": no_links})}
        ),
        embedder,
    )
    gained = bridged_recall(with_links) - bridged_recall(without)
    assert gained >= 0.15, (bridged_recall(with_links), bridged_recall(without))
    assert bridged_recall(with_links) >= 0.90
    single = with_links.by_category["single-hop"].recall[10]
    assert single >= without.by_category["single-hop"].recall[10] - 1e-9
