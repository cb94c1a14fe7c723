#!/usr/bin/env python
"""mem0 next to this sidecar's strategies on one evaluation dataset, in one run.

Both store the dataset's memories as written (mem0 through ``add(infer=False)``,
the sidecar through ``sidecar eval``'s ingest) and answer the same queries for the
same users; both embed with all-MiniLM-L6-v2 (mem0 through sentence-transformers,
the sidecar through its own encoder). The metrics are ``sidecar eval``'s
(``sidecar.evaluation.metrics``): mem0's top 10 is what ``search(top_k=10)``
returns, and its MRR reads ``search(top_k=50)``, as ``sidecar eval`` looks 50
deep. Latency: the sidecar's is ``MemoryService.search`` with the query embedded
beforehand (``sidecar eval``'s); mem0's is ``Memory.search``, embedding included.

    ./scripts/setup_mem0.sh     # once: .venv-mem0 with mem0ai
    .venv/bin/python -m scripts.compare_mem0 --dataset ../shared/data/longmemeval-dev.json \\
        --user-turns --json out/compare_mem0.json

``--user-turns`` keeps the memories that are a user's own turns (``user: ...``)
and the queries with evidence among them (their evidence narrowed to it): the
LongMemEval "user turns only" set.

What mem0 runs with here, and why (see :mod:`scripts.mem0_rankings`): Milvus
(milvus-lite) with its BM25 function as the keyword stage, cosine, mem0's search
defaults. Its spaCy stages (BM25 lemmatisation and the entity boost) are off
because spaCy's English model is not on the package registry and nothing here may
download at run time; mem0 then searches with the raw text, as it does wherever
spaCy is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from scripts.benchlib import REPO, percentile, write_report
from sidecar.config import load_config
from sidecar.evaluation.dataset import Dataset, load_dataset
from sidecar.evaluation.metrics import MRR_DEPTH, reciprocal_rank, score_query
from sidecar.evaluation.runner import (
    DEFAULT_KS,
    EvalOptions,
    QueryResult,
    StrategyResult,
    run_eval,
    strategy_result,
)

#: The interpreter of the environment ``scripts/setup_mem0.sh`` makes.
MEM0_PYTHON = REPO / ".venv-mem0" / "bin" / "python"
#: mem0's top ``K`` as an application asks for it; the metrics' summary depth.
K = 10


def user_turns(dataset: Dataset) -> Dataset:
    """The memories that are a user's own turns, and the queries with evidence
    among them (each query's evidence narrowed to those)."""
    memories = tuple(m for m in dataset.memories if m.content.startswith("user:"))
    kept = {m.id for m in memories}
    queries = []
    for query in dataset.queries:
        relevant = tuple(r for r in query.relevant_ids if r in kept)
        if relevant:
            queries.append(replace(query, relevant_ids=relevant))
    return Dataset(
        f"{dataset.name} (user turns)",
        dataset.description,
        memories,
        tuple(queries),
        dataset.source,
    )


def mem0_job(dataset: Dataset, store: Path) -> dict[str, Any]:
    """What :mod:`scripts.mem0_rankings` reads: memories, queries, depths, store."""
    return {
        "memories": [
            {"id": m.id, "user_id": m.user_id, "content": m.content} for m in dataset.memories
        ],
        "queries": [{"id": q.id, "user_id": q.user_id, "query": q.query} for q in dataset.queries],
        "depths": [K, MRR_DEPTH],
        "store": str(store),
    }


def mem0_result(
    dataset: Dataset, rankings: dict[str, dict[str, list[str]]], latencies: list[float]
) -> StrategyResult:
    """mem0's rankings scored as ``sidecar eval`` scores a strategy; ``latencies``:
    one per query, in the dataset's order.

    The top-``K`` metrics read what ``search(top_k=K)`` returned, as an application
    asking for ``K`` gets it; MRR reads the ``MRR_DEPTH``-deep search, as
    ``sidecar eval`` looks that deep.
    """
    ks = tuple(k for k in sorted({*DEFAULT_KS, K}) if k <= K)
    results = []
    for query, latency_ms in zip(dataset.queries, latencies, strict=True):
        found = rankings[query.id]
        top = tuple(found[str(K)])
        deep = found[str(MRR_DEPTH)]
        scores = replace(
            score_query(top, query.relevant_ids, ks),
            mrr=reciprocal_rank(deep, set(query.relevant_ids)),
        )
        results.append(
            QueryResult(
                query_id=query.id,
                category=query.category,
                ranked=top,
                scores=scores,
                latency_ms=latency_ms,
            )
        )
    return strategy_result("mem0", results, ks)


def run_mem0(dataset: Dataset, python: Path) -> tuple[StrategyResult, dict[str, Any]]:
    """mem0's rankings from a subprocess under ``python``; and what it ran
    (``version``, ``add_s``: seconds its adds took)."""
    with tempfile.TemporaryDirectory(prefix="mem0-") as tmp:
        work = Path(tmp)
        job, out = work / "job.json", work / "rankings.json"
        (work / "store").mkdir()
        job.write_text(json.dumps(mem0_job(dataset, work / "store")), encoding="utf-8")
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        subprocess.run(
            [str(python), "-m", "scripts.mem0_rankings", str(job), str(out)],
            cwd=REPO,
            env=env,
            check=True,
        )
        report = json.loads(out.read_text(encoding="utf-8"))
    # Two searches per query (top K, then MRR_DEPTH deep); the first is the latency.
    latencies = report["search_ms"][::2]
    ran = {"version": report.get("version", ""), "add_s": float(report["add_s"])}
    return mem0_result(dataset, report["rankings"], latencies), ran


def _row(result: StrategyResult) -> dict[str, float]:
    scores = result.overall
    return {
        f"recall@{K}": scores.recall[K],
        f"hit@{K}": scores.hit[K],
        "mrr": scores.mrr,
        "p50_ms": percentile(result.latencies_ms, 50),
        "p99_ms": percentile(result.latencies_ms, 99),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--user-turns", action="store_true", help="user turns only")
    parser.add_argument("--strategies", default="default,hybrid,dense")
    parser.add_argument("--mem0-python", type=Path, default=MEM0_PYTHON)
    parser.add_argument("--config", type=Path, help="sidecar config (default: defaults)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if not args.dataset.exists():
        print(f"skipped: no dataset at {args.dataset}", file=sys.stderr)
        return 2
    if not args.mem0_python.exists():
        print(
            f"no mem0 environment at {args.mem0_python}: run ./scripts/setup_mem0.sh",
            file=sys.stderr,
        )
        return 2
    warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
    dataset = load_dataset(args.dataset)
    if args.user_turns:
        dataset = user_turns(dataset)
    print(
        f"{dataset.name}: {len(dataset.memories)} memories, {len(dataset.queries)} queries",
        flush=True,
    )
    started = time.perf_counter()
    mem0, mem0_ran = run_mem0(dataset, args.mem0_python)
    print(
        f"mem0 {mem0_ran['version']}: {len(dataset.memories)} memories added in "
        f"{mem0_ran['add_s']:.0f} s",
        flush=True,
    )
    options = EvalOptions(
        strategies=tuple(s for s in args.strategies.split(",") if s), ks=DEFAULT_KS
    )
    ours = asyncio.run(run_eval(dataset, load_config(args.config), options))
    rows = {r.name: _row(r) for r in (*ours.strategies, mem0)}
    print(f"\n{'':<10} recall@{K}  hit@{K}   MRR    p50 ms  p99 ms")
    for name, row in rows.items():
        print(
            f"{name:<10} {row[f'recall@{K}']:.3f}      {row[f'hit@{K}']:.3f}  "
            f"{row['mrr']:.3f}  {row['p50_ms']:6.2f}  {row['p99_ms']:6.2f}"
        )
    report = {
        "dataset": str(args.dataset),
        "user_turns": args.user_turns,
        "memories": len(dataset.memories),
        "queries": len(dataset.queries),
        "mem0": mem0_ran,
        "strategies": rows,
        "by_category": {
            r.name: {c: s.recall[K] for c, s in r.by_category.items()}
            for r in (*ours.strategies, mem0)
        },
        "rankings": {
            r.name: {q.query_id: list(q.ranked[:K]) for q in r.queries}
            for r in (*ours.strategies, mem0)
        },
        "seconds": time.perf_counter() - started,
    }
    write_report(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
