"""Strategies by name. Every name here is a valid ``retrieval.strategy``.

=============  ===============================================================
dense          cosine over the scope's corpus (baseline)
dense-milvus   cosine search in the store with the scope filter (baseline)
bm25           BM25 over the scope's own documents (baseline)
bm25-milvus    Milvus' full-text BM25 (collection-wide statistics)
ngram          character-trigram Jaccard
hybrid         weighted fusion of cosine, BM25 and n-grams
hybrid-rrf     reciprocal-rank fusion of the same signals
linked         hybrid + link expansion
default        hybrid + conversation context, question cues and session
               lift + named-topic propagation + link expansion
               + composite re-rank
               (+ associative expansion when ``associative.enabled``)
associative    default with associative multi-hop expansion forced on
hierarchical   two-phase category search with best-first drill-down
tiered         progressive abstract -> overview -> content search
=============  ===============================================================
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import get_args

from sidecar.config import RetrievalConfig, StrategyName
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.features import Reader
from sidecar.memory.corpus.warming import Prepare
from sidecar.memory.read.retrieval import conversation, cues, links
from sidecar.memory.read.retrieval.base import Retriever
from sidecar.memory.read.retrieval.hierarchical import HierarchicalRetriever
from sidecar.memory.read.retrieval.pipeline import PipelineRetriever
from sidecar.memory.read.retrieval.store_side import MilvusBM25Retriever, MilvusDenseRetriever
from sidecar.memory.read.retrieval.tiered import TieredRetriever

STRATEGY_NAMES: tuple[str, ...] = get_args(StrategyName)


def build_retrievers() -> dict[str, Retriever]:
    retrievers: list[Retriever] = [
        PipelineRetriever("dense", base="cosine"),
        MilvusDenseRetriever(),
        PipelineRetriever("bm25", base="bm25"),
        MilvusBM25Retriever(),
        PipelineRetriever("ngram", base="ngram"),
        PipelineRetriever("hybrid", base="fused"),
        PipelineRetriever("hybrid-rrf", base="fused", fusion="rrf"),
        PipelineRetriever("linked", base="fused", links=True),
        PipelineRetriever(
            "default",
            base="fused",
            conversation=True,
            topics=True,
            links=True,
            rerank=True,
            associative="config",
        ),
        PipelineRetriever(
            "associative",
            base="fused",
            conversation=True,
            topics=True,
            links=True,
            rerank=True,
            associative="on",
        ),
        HierarchicalRetriever(),
        TieredRetriever(),
    ]
    return {r.name: r for r in retrievers}


def memory_readers() -> tuple[tuple[str, Reader], ...]:
    """What the in-process strategies' stages read of every memory (memo name,
    reader), for the corpus cache to read as memories enter it
    (:class:`~sidecar.memory.corpus.read_ahead.ReadAhead`)."""
    return (*conversation.READ_AHEAD, *cues.READ_AHEAD, *links.READ_AHEAD)


def preparer(retrievers: Mapping[str, Retriever], config: RetrievalConfig) -> Prepare | None:
    """What ``config``'s strategy reads of every memory of a snapshot whatever the
    question, made a step at a time, for the corpus cache to ready new snapshots
    with (:mod:`~sidecar.memory.corpus.warming`); None for a strategy that reads
    nothing so (scores made by the store, or from per-query values only)."""
    retriever = retrievers.get(config.strategy)
    if not isinstance(retriever, PipelineRetriever):
        return None
    ranker = retriever

    def prepare(corpus: Corpus, user_id: str) -> Iterator[None]:
        return ranker.prepare(corpus, config, user_id)

    return prepare
