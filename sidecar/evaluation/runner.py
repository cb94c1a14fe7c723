"""The evaluation loop: every query through every strategy, as the request path runs it.

Each query is embedded once (``MemoryService.embed_query``) and the vector reused by
every strategy; each strategy answers through ``MemoryService.search`` — the same
code the ext_proc request path calls — with the configured ``defaults.retrieval``
(strategy replaced) and ``top_k = max(50, max k)``. Only the search is timed: the
shared embedding is reported on its own.

Every returned memory is checked against the query's scope with the dataset's
visibility rule (independently of the store's filters); violations are counted and
make ``sidecar eval`` fail. With ``off_topic`` every query is asked again of another
user, untimed, for what the block would inject where nothing answers it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from pydantic import ValidationError

from sidecar.config import RetrievalConfig, SidecarConfig, format_validation_error
from sidecar.errors import InvalidInput
from sidecar.evaluation.dataset import Dataset, EvalMemory, EvalQuery
from sidecar.evaluation.followup import FollowupStats, VariantRow, run_variants
from sidecar.evaluation.ingest import IngestStats, eval_environment, ingest, with_llm_url
from sidecar.evaluation.metrics import MRR_DEPTH, Scores, mean_scores, percentile, score_query
from sidecar.evaluation.off_topic import OffTopic, allowed, block_lines, off_topic_scopes, tally
from sidecar.evaluation.progress import progress_bar
from sidecar.memory.embedding.factory import build_embedder
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.read.block import distinct_hits
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.retrieval.registry import build_retrievers
from sidecar.memory.read.service import MemoryService
from sidecar.memory.read.support import unsupported
from sidecar.memory.records.records import Hit, Scope
from sidecar.runtime.components import Components

DEFAULT_KS: tuple[int, ...] = (1, 5, 10, 20)
MAX_K = 1000
#: Always measured, so every run has its own reference points.
BASELINES: tuple[str, ...] = ("dense", "bm25")
#: The k of the per-category tables and the comparison with the baselines.
SUMMARY_K = 10


@dataclass(frozen=True, slots=True)
class EvalOptions:
    #: ``None``: every registered strategy.
    strategies: tuple[str, ...] | None = None
    ks: tuple[int, ...] = DEFAULT_KS
    #: Evidence gate off (``threshold=-1``, ``lexical_threshold=0``): pure ranking.
    no_threshold: bool = False
    #: File memories that carry a ``cluster`` label under a named topic of that name,
    #: as if a perfect topic-labelling LLM had given each fact its dataset's label: an
    #: upper bound, never the product's figure. Off (the default): memories are
    #: filed as the write path files them without an LLM.
    oracle_topics: bool = False
    limit_queries: int | None = None
    #: ``None``: a temporary milvus-lite file; ``"config"``: the config's store URI.
    store_uri: str | None = None
    progress: bool = False
    #: Add ``<strategy>+rewrite`` (and with ``deep_search`` ``+deep``) rows for the
    #: configured strategy: follow-up rewriting from each query's ``context``.
    rewrite: bool = False
    #: Add ``<strategy>+deep`` rows: deep search as with ``deep_search.mode: on``.
    deep_search: bool = False
    #: The LLM for rewriting and ranking (e.g. the mock); default: the config's
    #: ``llm.base_url``; none: the heuristic resolver and the non-LLM re-rank.
    llm_url: str | None = None
    #: Extra rows, each (name, retrieval settings changed: dotted path -> value), on
    #: the same store and queries: an ablation or a candidate setting side by side
    #: with the configured one ("strategy" picks another strategy).
    variants: tuple[tuple[str, Mapping[str, object]], ...] = ()
    #: Also ask every query of another user whose memories hold none of its answers
    #: (:mod:`sidecar.evaluation.off_topic`): what the gate keeps out of the block.
    off_topic: bool = False


@dataclass(frozen=True, slots=True)
class QueryResult:
    query_id: str
    category: str | None
    #: Returned memory ids, best first.
    ranked: tuple[str, ...]
    scores: Scores
    latency_ms: float
    #: Returned ids the query's scope may not read.
    violations: tuple[str, ...] = ()
    #: The lines the block would inject (the profile's ``top_k`` distinct memories)...
    lines: int = 0
    #: ...those without evidence of their own or a name shared with one that has
    #: (:func:`~sidecar.memory.read.support.unsupported`, from the signals)...
    unsupported: int = 0
    #: ...and as many would have been without the request path's link filter.
    unsupported_unfiltered: int = 0


@dataclass(frozen=True, slots=True)
class StrategyResult:
    name: str
    overall: Scores
    by_category: dict[str, Scores]
    queries: tuple[QueryResult, ...] = field(repr=False)
    #: The questions asked of another user (``--off-topic``; None: not asked).
    off_topic: OffTopic | None = None

    @property
    def latencies_ms(self) -> list[float]:
        return [q.latency_ms for q in self.queries]

    @property
    def latency_p50_ms(self) -> float:
        return percentile(self.latencies_ms, 50)

    @property
    def latency_p99_ms(self) -> float:
        return percentile(self.latencies_ms, 99)

    @property
    def violations(self) -> int:
        """Returned memories out of scope, the questions asked of another user's included."""
        moved = self.off_topic.violations if self.off_topic is not None else 0
        return sum(len(q.violations) for q in self.queries) + moved

    @property
    def injected_lines(self) -> int:
        return sum(q.lines for q in self.queries)

    @property
    def unsupported_lines(self) -> int:
        return sum(q.unsupported for q in self.queries)

    @property
    def unsupported_unfiltered(self) -> int:
        return sum(q.unsupported_unfiltered for q in self.queries)

    def query(self, query_id: str) -> QueryResult:
        for result in self.queries:
            if result.query_id == query_id:
                return result
        raise KeyError(query_id)


@dataclass(frozen=True, slots=True)
class Baseline:
    value: float
    strategy: str


@dataclass(frozen=True, slots=True)
class EvalResult:
    dataset: Dataset  # with the evaluated queries only
    total_queries: int
    ks: tuple[int, ...]
    strategies: tuple[StrategyResult, ...]
    added_baselines: tuple[str, ...]
    retrieval: RetrievalConfig
    no_threshold: bool
    #: Whether dataset ``cluster`` labels were filed as named topics (an upper bound).
    oracle_topics: bool
    config: SidecarConfig = field(repr=False)
    config_source: str | None
    store: str
    ingest: IngestStats
    embed_ms: tuple[float, ...]
    top_k: int
    seconds: float
    #: Rewrite / deep search statistics when ``--rewrite`` or ``--deep-search``.
    followup: FollowupStats | None = None
    #: The ``--variant`` rows: name and the retrieval settings it changed.
    variants: tuple[tuple[str, Mapping[str, object]], ...] = ()
    #: Whether every query was also asked of another user (``--off-topic``).
    off_topic: bool = False

    @property
    def strategy_names(self) -> list[str]:
        return [s.name for s in self.strategies]

    def strategy(self, name: str) -> StrategyResult:
        for result in self.strategies:
            if result.name == name:
                return result
        raise KeyError(name)

    @property
    def violations(self) -> int:
        return sum(s.violations for s in self.strategies)

    def baseline(self, metric: str) -> Baseline:
        """The best of the baselines on ``metric`` (``recall@K``, ``mrr``...)."""
        return max(
            (Baseline(metric_value(self.strategy(n).overall, metric), n) for n in BASELINES),
            key=lambda b: b.value,
        )


def metric_value(scores: Scores, metric: str) -> float:
    """``mrr`` or ``<recall|hit|precision|ndcg>@<k>`` of ``scores``."""
    if metric == "mrr":
        return scores.mrr
    name, _, k = metric.partition("@")
    table = {
        "recall": scores.recall,
        "hit": scores.hit,
        "precision": scores.precision,
        "ndcg": scores.ndcg,
    }
    try:
        return table[name][int(k)]
    except (KeyError, ValueError):
        raise KeyError(metric) from None


def registered_strategies() -> list[str]:
    """Every strategy name the request path accepts, in the registry's order."""
    return list(build_retrievers())


def resolve_strategies(
    requested: Sequence[str] | None, known: Sequence[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(strategies to run, baselines added because ``requested`` lacked them)."""
    if requested is None:
        chosen = list(known)
    else:
        unknown = [name for name in requested if name not in known]
        if unknown:
            raise InvalidInput(
                f"unknown strategy {', '.join(repr(n) for n in unknown)} "
                f"(known: {', '.join(known)})"
            )
        chosen = list(dict.fromkeys(requested))
    missing = [name for name in BASELINES if name not in chosen]
    return tuple(missing + chosen), tuple(missing)


def check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    if not ks:
        raise InvalidInput("--k needs at least one cut-off")
    for k in ks:
        if not 1 <= k <= MAX_K:
            raise InvalidInput(f"k must be between 1 and {MAX_K}, not {k}")
    return tuple(sorted(set(ks)))


def with_settings(retrieval: RetrievalConfig, changes: Mapping[str, object]) -> RetrievalConfig:
    """``retrieval`` with settings changed by dotted path ("conversation.enabled"),
    validated as a config file's would be."""
    data = retrieval.model_dump()
    for path, value in changes.items():
        node = data
        *parents, leaf = path.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                raise InvalidInput(f"unknown retrieval setting {path!r}")
            node = child
        if leaf not in node:
            raise InvalidInput(f"unknown retrieval setting {path!r}")
        node[leaf] = value
    try:
        return RetrievalConfig.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(f"invalid retrieval settings: {format_validation_error(exc)}") from exc


def evaluation_retrieval(config: SidecarConfig, *, no_threshold: bool) -> RetrievalConfig:
    """``defaults.retrieval``, with the evidence gate off for ``no_threshold``."""
    retrieval = config.defaults.retrieval
    if no_threshold:
        retrieval = retrieval.model_copy(update={"threshold": -1.0, "lexical_threshold": 0.0})
    return retrieval


async def run_eval(
    dataset: Dataset,
    config: SidecarConfig,
    options: EvalOptions,
    *,
    embedder: Embedder | None = None,
    config_source: str | None = None,
) -> EvalResult:
    """Ingest ``dataset`` into a fresh store and evaluate the strategies.

    ``embedder``: reuse an open one (left open); by default one is built from
    ``config.embedding`` and closed afterwards.
    """
    started = time.perf_counter()
    ks = check_ks(options.ks)
    metric_ks = tuple(sorted({*ks, SUMMARY_K}))
    strategies, added = resolve_strategies(options.strategies, registered_strategies())
    if options.limit_queries is not None and options.limit_queries < 1:
        raise InvalidInput("--limit-queries must be at least 1")
    data = dataset.limited(options.limit_queries)
    config = with_llm_url(config, options.llm_url)
    retrieval = evaluation_retrieval(config, no_threshold=options.no_threshold)
    variant_settings = [
        (label, with_settings(retrieval, changes)) for label, changes in options.variants
    ]
    labels = [label for label, _ in variant_settings]
    clash = sorted(
        {*labels} & {*registered_strategies()} | {n for n in labels if labels.count(n) > 1}
    )
    if clash:
        raise InvalidInput(f"variant names must be new and distinct: {', '.join(clash)}")
    variants = options.rewrite or options.deep_search
    if variants and retrieval.strategy not in strategies:
        strategies = (*strategies, retrieval.strategy)
    top_k = max(MRR_DEPTH, *ks)
    followup: FollowupStats | None = None

    owns_embedder = embedder is None
    if embedder is None:
        loop = asyncio.get_running_loop()
        embedder = await loop.run_in_executor(None, build_embedder, config.embedding)
    try:
        async with eval_environment(config, embedder, store_uri=options.store_uri) as env:
            memory = env.components.read.memory
            for name in strategies:
                memory.retriever(name)  # the service knows every registered name
            stats = await ingest(data, env, progress=options.progress, topics=options.oracle_topics)
            vectors, embed_ms = await _embed_queries(memory, data.queries, retrieval)
            memories = {m.id: m for m in data.memories}
            moved = off_topic_scopes(data) if options.off_topic else None
            bar = progress_bar(
                len(strategies) * len(data.queries),
                "retrieval",
                enabled=options.progress,
                unit="q",
            )
            results = []
            try:
                for name in strategies:
                    results.append(
                        await _run_strategy(
                            memory,
                            name,
                            retrieval.model_copy(update={"strategy": name}),
                            data.queries,
                            vectors,
                            memories,
                            metric_ks,
                            top_k,
                            bar.update,
                            moved,
                        )
                    )
            finally:
                bar.close()
            for label, changed in variant_settings:
                results.append(
                    await _run_strategy(
                        memory,
                        label,
                        changed,
                        data.queries,
                        vectors,
                        memories,
                        metric_ks,
                        top_k,
                        lambda _n: None,
                        moved,
                    )
                )
            if variants:
                rows, followup = await _run_variants(
                    env.components, config, retrieval, data, options, top_k
                )
                results.extend(
                    _variant_result(n, r, memories, metric_ks, retrieval) for n, r in rows
                )
            store = env.store.description
    finally:
        if owns_embedder:
            await embedder.close()
    return EvalResult(
        dataset=data,
        total_queries=len(dataset.queries),
        ks=ks,
        strategies=tuple(results),
        added_baselines=added,
        retrieval=retrieval,
        no_threshold=options.no_threshold,
        oracle_topics=options.oracle_topics,
        config=config,
        config_source=config_source,
        store=store,
        ingest=stats,
        embed_ms=tuple(embed_ms),
        top_k=top_k,
        seconds=time.perf_counter() - started,
        followup=followup,
        variants=options.variants,
        off_topic=options.off_topic,
    )


async def _run_variants(
    components: Components,
    config: SidecarConfig,
    retrieval: RetrievalConfig,
    data: Dataset,
    options: EvalOptions,
    top_k: int,
) -> tuple[list[VariantRow], FollowupStats]:
    llm = components.llm
    if llm.configured:
        what = f"the LLM at {config.llm.base_url} (model {config.llm.model})"
    else:
        what = "no LLM: the heuristic resolver and the non-LLM re-rank"
    passes = 1 + (2 if options.rewrite else 1) * options.deep_search
    bar = progress_bar(passes * len(data.queries), "follow-ups", enabled=options.progress, unit="q")
    try:
        return await run_variants(
            components.read.pipeline,
            config,
            retrieval,
            data.queries,
            top_k,
            rewrite=options.rewrite,
            deep=options.deep_search,
            llm_description=what,
            advance=bar.update,
        )
    finally:
        bar.close()


def _variant_result(
    name: str,
    rows: Sequence[tuple[EvalQuery, list[Hit], float]],
    memories: dict[str, EvalMemory],
    ks: Sequence[int],
    retrieval: RetrievalConfig,
) -> StrategyResult:
    results = [_query_result(q, hits, ms, memories, ks, retrieval) for q, hits, ms in rows]
    return strategy_result(name, results, ks)


def _query_result(
    query: EvalQuery,
    hits: Sequence[Hit],
    latency_ms: float,
    memories: dict[str, EvalMemory],
    ks: Sequence[int],
    retrieval: RetrievalConfig,
) -> QueryResult:
    """One query's ranking, scores against its labels, any memory it returned that
    its scope may not see, and the support of the lines its block would inject."""
    ranked = tuple(hit.record.id for hit in hits)
    ranked_hits = list(hits)
    lines = block_lines(ranked_hits, retrieval.top_k)
    unfiltered = distinct_hits(ranked_hits, retrieval.top_k)
    return QueryResult(
        query_id=query.id,
        category=query.category,
        ranked=ranked,
        scores=score_query(ranked, query.relevant_ids, ks),
        latency_ms=latency_ms,
        violations=tuple(h.record.id for h in hits if not allowed(h, query.scope, memories)),
        lines=len(lines),
        unsupported=unsupported(lines, retrieval),
        unsupported_unfiltered=unsupported(unfiltered, retrieval),
    )


async def _embed_queries(
    memory: MemoryService, queries: Sequence[EvalQuery], retrieval: RetrievalConfig
) -> tuple[list[Query], list[float]]:
    vectors: list[Query] = []
    elapsed: list[float] = []
    for query in queries:
        started = time.perf_counter()
        vectors.extend(await memory.embed([query.query], retrieval))
        elapsed.append((time.perf_counter() - started) * 1000)
    return vectors, elapsed


async def _run_strategy(
    memory: MemoryService,
    name: str,
    retrieval: RetrievalConfig,
    queries: Sequence[EvalQuery],
    vectors: Sequence[Query],
    memories: dict[str, EvalMemory],
    ks: Sequence[int],
    top_k: int,
    advance: Callable[[int], object],
    off_topic: Mapping[str, Scope] | None = None,
) -> StrategyResult:
    # One untimed search first: lazy per-corpus work is not charged to one query.
    await memory.search(vectors[0], queries[0].scope, retrieval, top_k=top_k)
    results: list[QueryResult] = []
    for query, vector in zip(queries, vectors, strict=True):
        started = time.perf_counter()
        hits = await memory.search(vector, query.scope, retrieval, top_k=top_k)
        latency_ms = (time.perf_counter() - started) * 1000
        results.append(_query_result(query, hits, latency_ms, memories, ks, retrieval))
        advance(1)
    result = strategy_result(name, results, ks)
    if off_topic is None:
        return result
    moved: list[tuple[Scope, list[Hit]]] = []
    for query, vector in zip(queries, vectors, strict=True):
        scope = off_topic.get(query.id)
        if scope is not None:
            moved.append((scope, await memory.search(vector, scope, retrieval, top_k=top_k)))
    return replace(result, off_topic=tally(moved, retrieval.top_k, memories))


def strategy_result(name: str, results: list[QueryResult], ks: Sequence[int]) -> StrategyResult:
    """One strategy's per-query results with their overall and per-category means."""
    by_category: dict[str, list[Scores]] = {}
    for result in results:
        if result.category is not None:
            by_category.setdefault(result.category, []).append(result.scores)
    return StrategyResult(
        name=name,
        overall=mean_scores([r.scores for r in results], ks),
        by_category={c: mean_scores(s, ks) for c, s in sorted(by_category.items())},
        queries=tuple(results),
    )
