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

from typing import get_args

from sidecar.config import StrategyName
from sidecar.memory.corpus.features import Reader
from sidecar.memory.read.retrieval import conversation, cues
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
    return (*conversation.READ_AHEAD, *cues.READ_AHEAD)
