#!/usr/bin/env python
"""Query-rewrite latency on the request path's code: fast path vs heuristic vs LLM.

Times :meth:`QueryRewriter.rewrite` (the decision, the rewrite and its confidence)
for an ambiguous follow-up mix and a clear mix:

* ``fast_path``  clear queries: detection only, no LLM call
* ``heuristic``  ambiguous queries, no LLM configured: the heuristic resolver
* ``llm``        ambiguous queries answered by the mock LLM over HTTP (in-process
                 aiohttp server on loopback, ``--mock-latency-ms`` of model time)
* ``cache``      the same ambiguous queries again: answered from the rewrite cache

Every query gets a fresh user id (no cache hits) except in the ``cache`` pass.
Retrieval is not included (see ``sidecar eval`` and ``scripts.bench_latency``)::

    .venv/bin/python -m scripts.bench_rewrite --requests 500 --json out/bench_rewrite.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from e2e.mock_llm import start_mock
from scripts.benchlib import percentile, write_report
from sidecar.config import LLMConfig, RewriteConfig
from sidecar.llm import LLMClient
from sidecar.memory.read.rewrite.rewriter import QueryRewriter
from sidecar.metrics import Metrics

CLEAR = [
    "Where do I live?",
    "What is my sister's name?",
    "Which editor do I prefer?",
    "What did I do this weekend?",
    "How many cats do I have?",
    "What did Caroline say about her mom?",
]
AMBIGUOUS = [
    ("Where does she live now?", "My sister Ana moved to Lisbon last spring."),
    ("When did he start it?", "My brother Tom talked about the pottery class again."),
    ("Is that one still open?", "We went to the Italian place near the station."),
    ("What did they say about it?", "My parents Rosa and Luis called about the wedding."),
    ("And Mia?", "Where does my colleague Tom work?"),
    ("What did we discuss earlier?", "Let's plan the trip to Kyoto with Ana."),
]


async def measure(
    rewriter: QueryRewriter,
    config: RewriteConfig,
    items: list[tuple[str, str]],
    requests: int,
    *,
    same_user: bool = False,
) -> dict[str, Any]:
    times: list[float] = []
    reasons: dict[str, int] = {}
    for i in range(requests):
        query, context = items[i % len(items)]
        history = [("user", context), ("assistant", "Noted.")] if context else []
        user = "bench" if same_user else f"user-{i}"
        started = time.perf_counter()
        result = await rewriter.rewrite(query, history, user, config)
        times.append((time.perf_counter() - started) * 1000)
        reasons[result.reason] = reasons.get(result.reason, 0) + 1
    return {
        "requests": requests,
        "p50_ms": percentile(times, 50),
        "p99_ms": percentile(times, 99),
        "mean_ms": statistics.fmean(times),
        "reasons": reasons,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    config = RewriteConfig(timeout_ms=args.timeout_ms)
    results: dict[str, Any] = {}
    clear = [(q, "My sister Ana moved to Lisbon.") for q in CLEAR]
    offline = QueryRewriter(None, Metrics())
    results["fast_path"] = await measure(offline, config, clear, args.requests)
    results["heuristic"] = await measure(offline, config, AMBIGUOUS, args.requests)
    mock = await start_mock(task_latency_ms=args.mock_latency_ms)
    llm = LLMClient(LLMConfig(base_url=mock.base_url, model="mock-llm"), Metrics())
    try:
        online = QueryRewriter(llm, Metrics())
        await online.rewrite(*AMBIGUOUS[0][:1], [("user", AMBIGUOUS[0][1])], "warm", config)
        results["llm"] = await measure(online, config, AMBIGUOUS, args.requests)
        await measure(online, config, AMBIGUOUS, len(AMBIGUOUS), same_user=True)
        results["cache"] = await measure(online, config, AMBIGUOUS, args.requests, same_user=True)
        results["llm_calls"] = mock.stats()["tasks"].get("rewrite", 0)
    finally:
        await llm.close()
        await mock.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="rewrites per path")
    parser.add_argument(
        "--mock-latency-ms", type=float, default=0.0, help="model time the mock adds per call"
    )
    parser.add_argument("--timeout-ms", type=int, default=300, help="rewrite.timeout_ms")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    results = asyncio.run(run(args))
    print(f"{'path':<10} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}  reasons")
    for name in ("fast_path", "heuristic", "llm", "cache"):
        row = results[name]
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(row["reasons"].items()))
        print(
            f"{name:<10} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} {row['mean_ms']:>8.3f}  "
            f"{reasons}"
        )
    print(f"mock LLM rewrite calls: {results['llm_calls']} (model time {args.mock_latency_ms} ms)")
    document = {
        "results": results,
        "args": {k: str(v) for k, v in vars(args).items()},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    write_report(args.json, document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
