#!/usr/bin/env python
"""Retrieval latency per strategy at two store sizes, side by side with ``dense``.

For each store size (default 10k and 100k memories, 1k per user) the store is
seeded with synthetic memories (``e2e.seed``), then every strategy answers the same
queries for random users through ``MemoryService.search`` — the request path's
retrieval code. Reported per strategy: warm p50/p99 (corpus cached), the cold first
query of a user (corpus loaded from the store), and the query embedding time
measured once. Writes JSON with ``--json``.

    .venv/bin/python -m scripts.bench_retrieval --sizes 10000,100000 --json out/bench_retrieval.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from e2e.seed import seed, user_name
from scripts.benchlib import write_report
from sidecar.config import config_from_mapping
from sidecar.memory.records.records import Scope
from sidecar.runtime.components import Components

QUESTIONS = [
    "What is my favourite food?",
    "Which city do I live in?",
    "What do I do for work?",
    "What's my dog's name?",
    "Which editor do I prefer?",
    "What do I usually order at the coffee shop?",
    "Any plans for the weekend?",
    "What programming language do I like?",
    "Which band do I listen to?",
    "What is my morning routine?",
]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def measure(
    uri: str, users: int, strategies: list[str], queries: int, cold_users: int
) -> dict[str, Any]:
    config = config_from_mapping({"store": {"uri": uri}}, env={})
    components = await Components.build(config)
    memory = components.read.memory
    base = config.defaults.retrieval
    rng = random.Random(11)
    results: dict[str, Any] = {}
    try:
        embed_ms: list[float] = []
        embedded = []
        for question in QUESTIONS:
            started = time.perf_counter()
            embedded.extend(await memory.embed([question], base))
            embed_ms.append((time.perf_counter() - started) * 1000)
        results["embed_p50_ms"] = round(statistics.median(embed_ms), 3)
        configs = {s: base.model_copy(update={"strategy": s}) for s in strategies}
        cold: dict[str, list[float]] = {s: [] for s in strategies}
        for strategy, retrieval in configs.items():
            for index in range(cold_users):
                components.read.memory.cache.clear()
                scope = Scope(user_name((index * 7919) % users))
                started = time.perf_counter()
                await memory.search(embedded[index % len(embedded)], scope, retrieval)
                cold[strategy].append((time.perf_counter() - started) * 1000)
        warm_users = [Scope(user_name(rng.randrange(users))) for _ in range(8)]
        for scope in warm_users:  # load their corpora and each strategy's own indexes
            for retrieval in configs.values():
                await memory.search(embedded[0], scope, retrieval)
        # Strategies take turns on every query, so background work (the store's own
        # compaction after a bulk load, say) falls on all of them alike.
        warm: dict[str, list[float]] = {s: [] for s in strategies}
        for i in range(queries):
            scope = warm_users[i % len(warm_users)]
            query = embedded[rng.randrange(len(embedded))]
            for strategy, retrieval in configs.items():
                started = time.perf_counter()
                await memory.search(query, scope, retrieval)
                warm[strategy].append((time.perf_counter() - started) * 1000)
        for strategy in strategies:
            results[strategy] = {
                "warm_p50_ms": round(pct(warm[strategy], 50), 3),
                "warm_p99_ms": round(pct(warm[strategy], 99), 3),
                # None with --cold-users 0 (nothing measured).
                "cold_p50_ms": round(pct(cold[strategy], 50), 3) if cold[strategy] else None,
            }
            print(
                f"  {strategy:<13} warm p50 {results[strategy]['warm_p50_ms']:7.2f} ms  "
                f"p99 {results[strategy]['warm_p99_ms']:7.2f} ms  "
                f"cold p50 {results[strategy]['cold_p50_ms'] or float('nan'):7.2f} ms",
                flush=True,
            )
    finally:
        await components.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--per-user", type=int, default=1000)
    parser.add_argument(
        "--strategies", default="dense,dense-milvus,bm25,hybrid,default,hierarchical,tiered"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--cold-users", type=int, default=10)
    parser.add_argument("--workdir", type=Path, help="keep seeded stores here (reused if present)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-retrieval-"))
    workdir.mkdir(parents=True, exist_ok=True)
    strategies = [s for s in args.strategies.split(",") if s]
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "per_user": args.per_user,
        "sizes": {},
    }
    try:
        for size in sizes:
            users = max(1, size // args.per_user)
            uri = str(workdir / f"store-{size}.db")
            if not Path(uri).exists():
                print(f"seeding {size} memories ({users} users) ...", flush=True)
                elapsed = asyncio.run(seed(uri, users, args.per_user))
                print(f"  seeded in {elapsed:.0f}s", flush=True)
            print(f"store of {size} memories:", flush=True)
            report["sizes"][str(size)] = asyncio.run(
                measure(uri, users, strategies, args.queries, args.cold_users)
            )
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    print()
    header = f"{'strategy':<13}" + "".join(
        f" {f'p50@{s // 1000}k':>10} {f'p99@{s // 1000}k':>10}" for s in sizes
    )
    if len(sizes) == 2:
        header += f" {'p50 ratio':>10}"
    print(header)
    for strategy in strategies:
        row = f"{strategy:<13}"
        p50s = []
        for size in sizes:
            stats = report["sizes"][str(size)][strategy]
            p50s.append(stats["warm_p50_ms"])
            row += f" {stats['warm_p50_ms']:>10.2f} {stats['warm_p99_ms']:>10.2f}"
        if len(sizes) == 2 and p50s[0] > 0:
            row += f" {p50s[1] / p50s[0]:>10.2f}"
        print(row)
    for size in sizes:
        print(f"embedding p50 ({size}): {report['sizes'][str(size)]['embed_p50_ms']:.2f} ms")
    write_report(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
