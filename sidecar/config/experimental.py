"""Experimental and evaluation-only settings: knobs that exist to measure
alternatives (with ``sidecar eval`` and the benchmarks in docs/benchmarks.md), not for
an operator to tune in production. Their defaults are the choice those measurements
made; they may change or go away.

Their keys stay where they always were (``retrieval.associative.*``,
``server.gc_freeze_interval_s``, ...): a whole experimental section is a model here
that a production model nests, and single knobs of a production section are a mixin
here that the production model inherits (``ServerConfig(ServerExperiments)``).
Everything defined in this module is listed in one section of the generated
reference, "Experimental and evaluation-only settings"; every description starts
with "Experimental:" and says what the knob was for.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sidecar.config.base import _Model

# -- knobs of production sections ------------------------------------------------------


class ServerExperiments(_Model):
    """``server``: how often the garbage collector's survivors are frozen and thawed
    (:mod:`sidecar.runtime.gc_control`)."""

    #: Experimental: for comparing freeze intervals. After a full garbage collection,
    #: what survived it (the cached corpora, mostly) is frozen out of later
    #: collections at most this often; 0: never. A full collection otherwise walks
    #: every cached memory while every request waits. Each freeze may hold back the
    #: reference cycles of the requests then in flight until the next thaw
    #: (docs/design/gc.md).
    gc_freeze_interval_s: float = Field(default=5.0, ge=0)
    #: Experimental: for comparing thaw intervals. Everything frozen is unfrozen this
    #: often (0: never), so the next full collection frees reference cycles frozen
    #: while they were alive: one long pause per interval.
    gc_thaw_interval_s: float = Field(default=3600.0, ge=0)


class EmbeddingExperiments(_Model):
    """``embedding``: micro-batching alternatives."""

    #: Experimental: for comparing a batching delay with running at once.
    #: Milliseconds an idle model waits for more calls before running a batch; 0
    #: (the default): run at once, and calls that arrive meanwhile form the next
    #: batch.
    batch_wait_ms: float = Field(default=0.0, ge=0, le=100)


class HierarchyBuildExperiments(_Model):
    """``hierarchy``: the category vector alternatives."""

    #: Experimental: for comparing category vectors. ``centroid``: the normalised mean
    #: of the category's memories' embeddings; ``summary``: the embedding of its
    #: summary text. They made no consistent difference to retrieval, and the
    #: centroid needs no model call and always matches the members.
    embedding: Literal["centroid", "summary"] = "centroid"


class LLMExperiments(_Model):
    """``llm``: the HTTP transport alternatives."""

    #: Experimental: for comparing the OpenAI client's HTTP transports. ``aiohttp``
    #: (its ``DefaultAioHttpClient``) costs the sidecar less CPU per call than
    #: ``httpx`` (its default), and every turn makes at least one call (extraction).
    transport: Literal["aiohttp", "httpx"] = "aiohttp"


class HybridExperiments(_Model):
    """``retrieval.hybrid``: fusion alternatives and the n-gram signal."""

    #: Experimental: for comparing fusions (the ``hybrid-rrf`` baseline uses ``rrf``
    #: whatever this says). ``weighted``: a weighted sum of the signals, each min-max
    #: normalised; ``rrf``: reciprocal rank fusion, which ranked worse.
    fusion: Literal["weighted", "rrf"] = "weighted"
    #: Experimental: for measuring a character-trigram signal in the fusion; 0: not
    #: computed. Weight of the trigram signal (``weighted`` fusion; renormalised with
    #: ``dense_weight`` and ``bm25_weight``).
    ngram_weight: float = Field(default=0.0, ge=0)
    #: Experimental: the constant of ``rrf`` fusion: score = sum over signals of
    #: 1 / (rrf_k + rank).
    rrf_k: int = Field(default=60, ge=1)
    #: Experimental: with ``ngram_weight`` > 0, n-gram Jaccard is computed for this
    #: many best candidates only (it is O(text)).
    ngram_pool: int = Field(default=64, ge=1, le=10_000)


class RewriteExperiments(_Model):
    """``rewrite``: what is searched after a rewrite."""

    #: Experimental: for comparing searches after a rewrite. ``rewrite``: search the
    #: rewritten query only; ``both``: search the original too and fuse the two
    #: rankings (reciprocal ranks, rewrite weighted 2:1), which did no better.
    search: Literal["rewrite", "both"] = "rewrite"


# -- whole sections ----------------------------------------------------------------------


class AssociativeConfig(_Model):
    """Multi-hop expansion through embedding neighbours (off by default; strategies
    ``default`` and ``associative``). It ranked as ``default`` does, at a higher
    cost per query."""

    #: Experimental: for measuring multi-hop expansion in strategy ``default`` (the
    #: ``associative`` strategy forces it on). Run the multi-hop beam search after
    #: direct retrieval.
    enabled: bool = False
    #: Experimental: associative expansion. Most hops from a seed.
    hop_limit: int = Field(default=3, ge=1, le=6)
    #: Experimental: associative expansion. Neighbours followed per memory and hop.
    beam_width: int = Field(default=2, ge=1, le=16)
    #: Experimental: associative expansion. Least cosine between a memory and a
    #: neighbour it leads to.
    min_cosine: float = Field(default=0.72, ge=-1, le=1)
    #: Experimental: associative expansion. Score factor per hop
    #: (``hop_decay ** hop``).
    hop_decay: float = Field(default=0.8, gt=0, le=1)
    #: Experimental: associative expansion. Seeds taken from the direct results.
    seeds: int = Field(default=5, ge=1, le=100)
    #: Experimental: associative expansion. Hard bound on memories visited per query.
    max_visits: int = Field(default=64, ge=1, le=10_000)
    #: Experimental: associative expansion. Prefer neighbours in the seed's own scope
    #: (its owner) over shared ones.
    same_scope_bonus: float = Field(default=0.02, ge=0, le=1)


class HierarchyConfig(_Model):
    """The ``hierarchical`` strategy: categories and leaves, then a best-first
    drill-down (the category tree itself is ``hierarchy``)."""

    #: Experimental: the ``hierarchical`` strategy's drill-down. Score propagation:
    #: ``alpha * child + (1 - alpha) * parent``.
    alpha: float = Field(default=0.8, ge=0, le=1)
    #: Experimental: the ``hierarchical`` strategy. Phase 1 keeps categories at least
    #: this similar (relaxed threshold).
    broad_threshold: float = Field(default=0.1, ge=-1, le=1)
    #: Experimental: the ``hierarchical`` strategy. Categories opened in phase 1.
    broad_categories: int = Field(default=6, ge=1, le=100)
    #: Experimental: the ``hierarchical`` strategy. A category's relevance is at least
    #: the best gated score among the memories of its subtree (evidence flowing up),
    #: not only its centroid's similarity.
    member_evidence: bool = True
    #: Experimental: the ``hierarchical`` strategy's drill-down. Stop when the top-k
    #: set has not changed for this many popped memories (pops of categories, and of
    #: memories already in the top-k, are not counted).
    convergence_rounds: int = Field(default=3, ge=1, le=100)
    #: Experimental: the ``hierarchical`` strategy's drill-down. Most queue pops
    #: (categories and memories) per query.
    max_rounds: int = Field(default=50, ge=1, le=10_000)


class TieredConfig(_Model):
    """The ``tiered`` strategy: progressive search abstract -> overview -> content,
    stopping early."""

    #: Experimental: when the ``tiered`` strategy stops early. A tier answers when its
    #: best ``min_results`` results (after the evidence gate) have a mean absolute
    #: score of at least ``min_avg_score``: the hybrid-weighted mean of cosine and the
    #: lexical share (0..1; fused scores are corpus-relative). Stopping earlier
    #: costs recall.
    min_results: int = Field(default=3, ge=1, le=100)
    #: Experimental: the ``tiered`` strategy. The mean absolute score a tier's best
    #: results need (see ``min_results``).
    min_avg_score: float = Field(default=0.6, ge=0, le=1)
