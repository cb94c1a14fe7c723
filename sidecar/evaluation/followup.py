"""Follow-up handling in ``sidecar eval``: query rewriting and deep search as variant
rows of the request path's strategy, measured in the same run as everything else.

For ``--rewrite`` every query goes through the request path's
:class:`~sidecar.memory.read.rewrite.rewriter.QueryRewriter` with its ``context`` as the chat
history (``defaults.rewrite``, enabled), and the searched text is what the request
path would search. For ``--deep-search`` every primary ranking (with and without
rewriting) is handed to :class:`~sidecar.memory.read.deep.search.DeepSearcher` exactly
as on the request path with ``deep_search.mode: on`` — escalating only below
``deep_search.threshold``, no rate limit, no feedback file — and, to tell the
gate's quality from the ranking's, once more *ungated* for every query.

The rewriter and the ranker use the configured LLM (``--llm-url``: e.g. the mock,
``python -m e2e.mock_llm``) or, without one, the heuristic resolver and the
non-LLM re-rank; the report says which.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sidecar.config import DeepSearchConfig, RetrievalConfig, RewriteConfig, SidecarConfig
from sidecar.evaluation.dataset import EvalQuery
from sidecar.evaluation.metrics import percentile
from sidecar.memory.read.deep.ranking import expand_candidates, primary_confidence
from sidecar.memory.read.pipeline import RequestPipeline
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.rewrite.rewriter import fuse_rewrite_hits
from sidecar.memory.read.service import MemoryService
from sidecar.memory.records.records import Hit, Scope

#: Deep search's blend and "recovered" count look at this many results.
RECOVERY_K = 10


@dataclass(frozen=True, slots=True)
class Recovery:
    """Deep search against one primary ranking."""

    primary: str  # the primary variant's row name
    queries: int
    #: Queries without a relevant memory in the primary top RECOVERY_K.
    missed: int
    #: ... of which the candidate pool the ranker read holds one (its ceiling).
    missed_in_pool: int
    #: ... of which deep search (run on every query) puts one in its top RECOVERY_K.
    recovered_ungated: int
    #: ... of which the gate escalated.
    missed_escalated: int
    #: ... of which escalated and recovered (what the request path would gain).
    recovered_gated: int
    escalated: int
    #: Queries the primary had right and the gated deep search lost.
    lost_gated: int


@dataclass(frozen=True, slots=True)
class FollowupStats:
    llm: str  # what answered the rewrite and rank tasks
    rewrite_reasons: dict[str, int] = field(default_factory=dict)
    rewrite_changed: int = 0
    rewrite_ms: tuple[float, ...] = ()
    deep_methods: dict[str, int] = field(default_factory=dict)
    deep_ms: tuple[float, ...] = ()
    recoveries: tuple[Recovery, ...] = ()

    @property
    def rewrite_p50_ms(self) -> float:
        return percentile(list(self.rewrite_ms), 50)

    @property
    def rewrite_p99_ms(self) -> float:
        return percentile(list(self.rewrite_ms), 99)

    @property
    def deep_p50_ms(self) -> float:
        return percentile(list(self.deep_ms), 50)


@dataclass(slots=True)
class _Ranked:
    query: Query
    hits: list[Hit]
    latency_ms: float

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(h.record.id for h in self.hits)


#: One variant row: its name and, per query, the ranked hits and the latency (ms).
VariantRow = tuple[str, list[tuple[EvalQuery, list[Hit], float]]]


def _has_relevant(ids: Sequence[str], relevant: Sequence[str]) -> bool:
    wanted = set(relevant)
    return any(i in wanted for i in ids[:RECOVERY_K])


async def _search_texts(
    memory: MemoryService,
    texts: Sequence[str],
    scope: Scope,
    retrieval: RetrievalConfig,
    top_k: int,
) -> tuple[Query, list[Hit]]:
    """The first text's query and hits, fused with the second's when given (as the
    request path does with ``rewrite.search: both``), waiting for the corpus."""
    queries = await memory.embed(texts, retrieval)
    hits = await memory.search(queries[0], scope, retrieval, top_k=top_k)
    if len(queries) > 1:
        more = await memory.search(queries[1], scope, retrieval, top_k=top_k)
        hits = fuse_rewrite_hits(hits, more, top_k)
    return queries[0], hits


async def run_variants(
    pipeline: RequestPipeline,
    config: SidecarConfig,
    retrieval: RetrievalConfig,
    queries: Sequence[EvalQuery],
    top_k: int,
    *,
    rewrite: bool,
    deep: bool,
    llm_description: str,
    advance: Callable[[int], object],
) -> tuple[list[VariantRow], FollowupStats]:
    """The variant rows of ``retrieval.strategy`` and the follow-up statistics: the
    request path's rewriter and deep search over the plain search."""
    memory = pipeline.memory
    base = retrieval.strategy
    rewrite_config: RewriteConfig = config.defaults.rewrite.model_copy(update={"enabled": True})
    deep_config: DeepSearchConfig = config.defaults.deep_search.model_copy(
        update={"feedback_path": ""}
    )
    primaries: dict[str, list[_Ranked]] = {base: []}
    if rewrite:
        primaries[f"{base}+rewrite"] = []
    reasons: Counter[str] = Counter()
    changed = 0
    rewrite_ms: list[float] = []
    for query in queries:
        started = time.perf_counter()
        vector, hits = await _search_texts(memory, [query.query], query.scope, retrieval, top_k)
        primaries[base].append(_Ranked(vector, hits, (time.perf_counter() - started) * 1000))
        if rewrite:
            started = time.perf_counter()
            history = [(turn.role, turn.content) for turn in query.context]
            result = await pipeline.rewriter.rewrite(
                query.query, history, query.user_id, rewrite_config
            )
            rewrite_ms.append(result.seconds * 1000)
            reasons[result.reason] += 1
            if result.changed:
                changed += 1
                texts = [result.query]
                if rewrite_config.search == "both":
                    texts.append(query.query)
                vector, hits = await _search_texts(memory, texts, query.scope, retrieval, top_k)
            elapsed = (time.perf_counter() - started) * 1000
            primaries[f"{base}+rewrite"].append(_Ranked(vector, hits, elapsed))
        advance(1)
    rows: list[VariantRow] = []
    if rewrite:
        name = f"{base}+rewrite"
        rows.append(
            (
                name,
                [(q, r.hits, r.latency_ms) for q, r in zip(queries, primaries[name], strict=True)],
            )
        )
    recoveries: list[Recovery] = []
    methods: Counter[str] = Counter()
    deep_ms: list[float] = []
    if deep:
        for name, ranked in primaries.items():
            gated_rows: list[tuple[EvalQuery, list[Hit], float]] = []
            missed = in_pool = recovered = missed_escalated = recovered_gated = 0
            escalated = lost = 0
            for query, primary in zip(queries, ranked, strict=True):
                corpus = await memory.cache.corpus(query.scope)
                confidence = primary_confidence(primary.hits, retrieval.top_k)
                gate = confidence.value < deep_config.threshold
                found = await pipeline.deep.run(
                    primary.query,
                    primary.hits,
                    corpus,
                    query.scope,
                    deep_config,
                    RECOVERY_K,
                    mode="eval",
                    confidence=confidence,
                )
                methods[found.method] += 1
                deep_ms.append(found.seconds * 1000)
                deep_ids = tuple(h.record.id for h in found.hits)
                latency = primary.latency_ms + (found.seconds * 1000 if gate else 0.0)
                gated_rows.append((query, found.hits if gate else primary.hits, latency))
                escalated += gate
                if not _has_relevant(primary.ids, query.relevant_ids):
                    missed += 1
                    pool = expand_candidates(primary.hits, corpus, query.scope, deep_config)
                    in_pool += any(corpus.records[c.index].id in query.relevant_ids for c in pool)
                    back = _has_relevant(deep_ids, query.relevant_ids)
                    recovered += back
                    missed_escalated += gate
                    recovered_gated += back and gate
                elif gate and not _has_relevant(deep_ids, query.relevant_ids):
                    lost += 1
                advance(1)
            rows.append((f"{name}+deep", gated_rows))
            recoveries.append(
                Recovery(
                    name,
                    len(queries),
                    missed,
                    in_pool,
                    recovered,
                    missed_escalated,
                    recovered_gated,
                    escalated,
                    lost,
                )
            )
    stats = FollowupStats(
        llm=llm_description,
        rewrite_reasons=dict(sorted(reasons.items())),
        rewrite_changed=changed,
        rewrite_ms=tuple(rewrite_ms),
        deep_methods=dict(sorted(methods.items())),
        deep_ms=tuple(deep_ms),
        recoveries=tuple(recoveries),
    )
    return rows, stats
