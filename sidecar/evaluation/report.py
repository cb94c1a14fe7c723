"""The evaluation's output: text tables for people, JSON with every number."""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sidecar.errors import SidecarError
from sidecar.evaluation.followup import RECOVERY_K
from sidecar.evaluation.metrics import MRR_DEPTH, percentile
from sidecar.evaluation.runner import BASELINES, SUMMARY_K, EvalResult, metric_value

_METRICS: tuple[tuple[str, str], ...] = (
    ("recall", "R"),
    ("hit", "H"),
    ("precision", "P"),
    ("ndcg", "N"),
)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], *, first: int = 0) -> list[str]:
    """Left-aligned first column, right-aligned others, widths from the content."""
    columns = [header, *rows]
    widths = [max(len(row[i]) for row in columns) for i in range(len(header))]
    if first:
        widths[0] = max(widths[0], first)
    lines = []
    for index, row in enumerate(columns):
        cells = [row[0].ljust(widths[0])]
        cells.extend(cell.rjust(widths[i]) for i, cell in enumerate(row[1:], start=1))
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def _points(delta: float) -> str:
    return f"{delta * 100:+.1f}"


def _describe_gate(result: EvalResult) -> str:
    retrieval = result.retrieval
    if result.no_threshold:
        return (
            "evidence gate OFF (--no-threshold: threshold -1, lexical_threshold 0): "
            "pure ranking quality"
        )
    return (
        f"evidence gate ON (threshold {retrieval.threshold:g}, lexical_threshold "
        f"{retrieval.lexical_threshold:g}, joint_gate {retrieval.joint_gate:g}), "
        "as on the request path"
    )


def _describe_topics(result: EvalResult) -> str:
    labelled = sum(1 for m in result.dataset.memories if m.cluster)
    if not labelled:
        return "categories: built by the write path's clustering (no 'cluster' labels)"
    if not result.oracle_topics:
        return (
            f"categories: as the write path files them ({labelled} 'cluster' labels "
            "ignored; --oracle-topics files them)"
        )
    return (
        f"categories: ORACLE TOPICS: {labelled} memories filed under named topics from "
        "their 'cluster' labels, as a perfect topic-labelling LLM would: the figures are "
        "an upper bound, not the product's"
    )


def format_text(result: EvalResult) -> str:
    data = result.dataset
    ingest = result.ingest
    categories = data.categories()
    lines = [
        f"dataset {data.name}: {len(data.memories)} memories of {len(data.users)} users"
        f" ({len(data.groups)} groups), {len(data.queries)} queries"
        + (f" of {result.total_queries}" if result.total_queries != len(data.queries) else "")
        + (f", {len(categories)} categories" if categories else ""),
        f"store: {result.store}",
        f"ingestion: {ingest.seconds:.1f} s for {ingest.memories} memories of "
        f"{ingest.owners} owners ({ingest.rows} rows): embedding {ingest.embed_seconds:.1f} s, "
        f"enrichment {ingest.enrich_seconds:.1f} s, store {ingest.store_seconds:.1f} s",
        "retrieval config: defaults.retrieval of "
        + (result.config_source or "the built-in defaults (no --config)")
        + f" with each strategy; top {result.top_k} searched",
        _describe_gate(result),
        _describe_topics(result),
        f"query embedding p50 {percentile(result.embed_ms, 50):.2f} ms "
        "(once per query, shared by all strategies, not in the latencies below)",
    ]
    for name, changes in result.variants:
        settings = ", ".join(f"{path}={value}" for path, value in changes.items())
        lines.append(f"variant {name}: the configured retrieval with {settings}")
    if result.added_baselines:
        lines.append(
            f"note: added baseline{'s' if len(result.added_baselines) > 1 else ''} "
            f"{', '.join(result.added_baselines)} (not in --strategies)"
        )
    lines.append("")

    header = ["strategy"]
    for _, short in _METRICS:
        header.extend(f"{short}@{k}" for k in result.ks)
    header.extend(["MRR", "p50 ms", "p99 ms"])
    rows = []
    for strategy in result.strategies:
        scores = strategy.overall
        row = [strategy.name]
        for name, _ in _METRICS:
            row.extend(f"{metric_value(scores, f'{name}@{k}'):.3f}" for k in result.ks)
        row.extend(
            [
                f"{scores.mrr:.3f}",
                f"{strategy.latency_p50_ms:.2f}",
                f"{strategy.latency_p99_ms:.2f}",
            ]
        )
        rows.append(row)
    lines.extend(_table(header, rows))
    lines.append(
        f"R recall, H hit, P precision (/k), N nDCG (binary gains), MRR within the top "
        f"{MRR_DEPTH}; latency: MemoryService.search per query, embedding excluded"
    )

    if categories:
        for title, metric in ((f"recall@{SUMMARY_K}", f"recall@{SUMMARY_K}"), ("MRR", "mrr")):
            lines.extend(["", f"{title} by category"])
            header = ["category", "n", *result.strategy_names]
            rows = []
            for category, count in categories.items():
                row = [category, str(count)]
                for strategy in result.strategies:
                    row.append(f"{metric_value(strategy.by_category[category], metric):.3f}")
                rows.append(row)
            lines.extend(_table(header, rows))

    recall_metric = f"recall@{SUMMARY_K}"
    best_recall = result.baseline(recall_metric)
    best_mrr = result.baseline("mrr")
    lines.extend(
        [
            "",
            f"vs baselines (best of {' and '.join(BASELINES)} in this run: {recall_metric} "
            f"{best_recall.value:.3f} ({best_recall.strategy}), MRR {best_mrr.value:.3f} "
            f"({best_mrr.strategy}); in points)",
        ]
    )
    rows = []
    for strategy in result.strategies:
        rows.append(
            [
                strategy.name,
                _points(metric_value(strategy.overall, recall_metric) - best_recall.value),
                _points(strategy.overall.mrr - best_mrr.value),
            ]
        )
    lines.extend(_table(["strategy", f"Δ R@{SUMMARY_K}", "Δ MRR"], rows))

    if result.followup is not None:
        lines.extend(["", *_followup_text(result)])

    lines.append("")
    lines.append(
        f"injected lines without evidence of their own (each query's top {result.retrieval.top_k}"
        " distinct, by cosine and lexical share against the gate, or a name shared with a"
        " line that has it): "
        + ", ".join(
            f"{s.name} {s.unsupported_lines}/{s.injected_lines}"
            + (
                f" ({s.unsupported_unfiltered} without the link filter)"
                if s.unsupported_unfiltered != s.unsupported_lines
                else ""
            )
            for s in result.strategies
        )
    )
    if result.off_topic:
        lines.extend(_off_topic_text(result))
    if result.violations:
        bad = ", ".join(f"{s.name} {s.violations}" for s in result.strategies if s.violations)
        lines.append(f"VISIBILITY VIOLATIONS: {result.violations} ({bad})")
    else:
        lines.append("visibility check: 0 violations (every returned memory is in the scope)")
    lines.append(f"total {result.seconds:.1f} s")
    return "\n".join(lines)


def _off_topic_text(result: EvalResult) -> list[str]:
    measured = [(s, s.off_topic) for s in result.strategies if s.off_topic is not None]
    if not measured or not measured[0][1].questions:
        return ["asked of another user: no question can be (the set needs two users)"]
    top_k = result.retrieval.top_k
    lines = [
        f"asked of another user (the next whose memories hold none of its answers; "
        f"{measured[0][1].questions} questions): lines the block would inject, of {top_k}"
    ]
    rows = []
    for strategy, off in measured:
        asked = len(strategy.queries)
        rows.append(
            [
                strategy.name,
                f"{off.with_lines_share:.0%}",
                f"{off.lines_per_question:.2f}",
                f"{strategy.injected_lines / asked if asked else 0.0:.2f}",
            ]
        )
    lines.extend(_table(["strategy", "with lines", "lines/q", "own lines/q"], rows))
    return lines


def _followup_text(result: EvalResult) -> list[str]:
    stats = result.followup
    assert stats is not None
    lines = [
        f"follow-ups: rewriting and ranking by {stats.llm}; the latency of the '+' rows is "
        "query embedding + rewrite + search (+ deep search when it escalates), unlike the "
        "search-only rows"
    ]
    if stats.rewrite_reasons:
        reasons = ", ".join(f"{k} {v}" for k, v in stats.rewrite_reasons.items())
        lines.append(
            f"rewrite: {stats.rewrite_changed} of {len(stats.rewrite_ms)} queries searched "
            f"rewritten ({reasons}); decision + rewrite p50 {stats.rewrite_p50_ms:.3f} ms, "
            f"p99 {stats.rewrite_p99_ms:.3f} ms"
        )
    if stats.recoveries:
        threshold = result.config.defaults.deep_search.threshold
        methods = ", ".join(f"{k} {v}" for k, v in stats.deep_methods.items())
        lines.append(
            f"deep search: escalates below confidence {threshold:g} (as on the request path; "
            f"+deep rows); ranking by {methods} runs, p50 {stats.deep_p50_ms:.2f} ms; "
            f"recovered = a relevant memory in the top {RECOVERY_K}; in pool = one among the "
            "candidates the ranker read (its ceiling)"
        )
        header = [
            "primary",
            "escalated",
            f"missed@{RECOVERY_K}",
            "in pool",
            "recovered (every query deep)",
            "missed+escalated",
            "recovered (gated)",
            "lost (gated)",
        ]
        rows = []
        for r in stats.recoveries:
            share = f" ({100 * r.recovered_ungated / r.missed:.1f}%)" if r.missed else ""
            gated = f" ({100 * r.recovered_gated / r.missed:.1f}%)" if r.missed else ""
            rows.append(
                [
                    r.primary,
                    f"{r.escalated}/{r.queries}",
                    str(r.missed),
                    str(r.missed_in_pool),
                    f"{r.recovered_ungated}{share}",
                    str(r.missed_escalated),
                    f"{r.recovered_gated}{gated}",
                    str(r.lost_gated),
                ]
            )
        lines.extend(_table(header, rows))
    return lines


def _followup_json(result: EvalResult) -> dict[str, Any] | None:
    stats = result.followup
    if stats is None:
        return None
    return {
        "llm": stats.llm,
        "rewrite": {
            "reasons": stats.rewrite_reasons,
            "rewritten": stats.rewrite_changed,
            "latency_ms": {"p50": stats.rewrite_p50_ms, "p99": stats.rewrite_p99_ms},
        },
        "deep_search": {
            "threshold": result.config.defaults.deep_search.threshold,
            "methods": stats.deep_methods,
            "latency_p50_ms": stats.deep_p50_ms,
            "recovery_k": RECOVERY_K,
            "by_primary": [asdict(r) for r in stats.recoveries],
        },
    }


def to_json(result: EvalResult) -> dict[str, Any]:
    data = result.dataset
    config = result.config
    recall_metric = f"recall@{SUMMARY_K}"
    best_recall = result.baseline(recall_metric)
    best_mrr = result.baseline("mrr")
    strategies: dict[str, Any] = {}
    for strategy in result.strategies:
        latencies = strategy.latencies_ms
        strategies[strategy.name] = {
            "overall": strategy.overall.as_dict(),
            "by_category": {c: s.as_dict() for c, s in strategy.by_category.items()},
            "latency_ms": {
                "p50": strategy.latency_p50_ms,
                "p99": strategy.latency_p99_ms,
                "mean": sum(latencies) / len(latencies) if latencies else 0.0,
                "max": max(latencies, default=0.0),
            },
            "vs_baselines_points": {
                recall_metric: 100
                * (metric_value(strategy.overall, recall_metric) - best_recall.value),
                "mrr": 100 * (strategy.overall.mrr - best_mrr.value),
            },
            "visibility_violations": strategy.violations,
            "injected": {
                "lines": strategy.injected_lines,
                "unsupported": strategy.unsupported_lines,
                "unsupported_share": (
                    strategy.unsupported_lines / strategy.injected_lines
                    if strategy.injected_lines
                    else 0.0
                ),
                "unsupported_without_link_filter": strategy.unsupported_unfiltered,
            },
            "off_topic": None if strategy.off_topic is None else strategy.off_topic.as_dict(),
        }
    return {
        "dataset": {
            "name": data.name,
            "description": data.description,
            "source": data.source,
            "memories": len(data.memories),
            "users": len(data.users),
            "groups": len(data.groups),
            "queries": len(data.queries),
            "queries_total": result.total_queries,
            "categories": data.categories(),
        },
        "ks": list(result.ks),
        "mrr_depth": MRR_DEPTH,
        "top_k": result.top_k,
        "strategy_order": result.strategy_names,
        "added_baselines": list(result.added_baselines),
        "strategies": strategies,
        "baselines": {
            recall_metric: {"value": best_recall.value, "strategy": best_recall.strategy},
            "mrr": {"value": best_mrr.value, "strategy": best_mrr.strategy},
        },
        "visibility_violations": result.violations,
        "followup": _followup_json(result),
        "config": {
            "source": result.config_source,
            "no_threshold": result.no_threshold,
            "evidence_gate": not result.no_threshold,
            "oracle_topics": result.oracle_topics,
            "variants": {name: dict(changes) for name, changes in result.variants},
            "off_topic": result.off_topic,
            "retrieval": result.retrieval.model_dump(mode="json"),
            "embedding": config.embedding.model_dump(mode="json"),
            "enrichment": config.enrichment.model_dump(mode="json"),
            "max_content_chars": config.store.max_content_chars,
            "store": result.store,
            # The whole effective configuration (secrets masked); the store and cache
            # settings above are what this run used instead of the file's.
            "file": config.model_dump(mode="json", by_alias=True),
        },
        "timings": {
            "total_s": result.seconds,
            "ingest_s": result.ingest.seconds,
            "ingest_embed_s": result.ingest.embed_seconds,
            "ingest_enrich_s": result.ingest.enrich_seconds,
            "ingest_store_s": result.ingest.store_seconds,
            "ingest_rows": result.ingest.rows,
            "query_embed_p50_ms": percentile(result.embed_ms, 50),
            "query_embed_p99_ms": percentile(result.embed_ms, 99),
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "implementation": sys.implementation.name,
            "platform": platform.platform(),
        },
    }


def write_json(result: EvalResult, path: str | Path) -> None:
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(to_json(result), indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise SidecarError(f"cannot write {path}: {exc.strerror}") from exc
