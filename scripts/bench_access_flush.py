"""What one access-count flush costs: ``--memories`` active memories of a seeded store
(a copy of it; e.g. one of ``bench_e2e.py --store-cache``), each injected once, then
flushed by the real :class:`~sidecar.memory.write.upkeep.access.AccessTracker`, ``--runs`` times
(the first run creates their access rows, later ones update them).

Prints each flush's wall time, the CPU time of this process and of its children
(the embedded milvus-lite server) over it, and how late a timer due every
millisecond ran on the event loop meanwhile (what every request of the process
would have waited). As in a serving sidecar, the owners' corpora are cached first
(``--no-cache``: not), so a flush also updates them; after each flush it times
getting every owner's corpus once (what their next requests pay, e.g. a rebuild)::

    .venv/bin/python -m scripts.bench_access_flush /tmp/bench-stores/memory-100000.db \\
        --memories 20000 --runs 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from e2e.loop_ticker import Ticker, lag_summary
from e2e.procstat import children_by_parent, cpu_seconds
from sidecar.config import CacheConfig, RetentionConfig, StoreConfig
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.records.records import Hit, NodeType, Scope
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.write.upkeep.access import AccessTracker
from sidecar.metrics import Metrics


def cpu_split(pid: int) -> tuple[float, float]:
    """(this process's CPU seconds, its children's)."""
    children = children_by_parent().get(pid, [])
    return cpu_seconds(pid), sum(cpu_seconds(child) for child in children)


async def run(store_file: Path, memories: int, runs: int, dim: int, cached: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-access-") as workdir:
        copy = Path(workdir) / "memory.db"
        shutil.copy(store_file, copy)
        metrics = Metrics()
        store = await MemoryStore.open(StoreConfig(uri=str(copy), timeout_s=300), dim, metrics)
        try:
            rows = await store.scan(build_filter(node_type=NodeType.MEMORY))
            sample = random.Random(0).sample(rows, min(memories, len(rows)))
            owners = len({r.user_id for r in sample})
            print(f"{len(sample)} memories of {owners} owners")
            # No refresh or reload due during the runs: only the flush is measured.
            cache = CorpusCache(store, CacheConfig(ttl_s=3600, full_reload_s=3600), metrics)
            scopes = sorted({Scope(r.user_id) for r in sample}, key=lambda scope: scope.user_id)
            if cached:
                started = time.perf_counter()
                for scope in scopes:
                    await cache.corpus(scope)
                print(f"cached {len(scopes)} owners' corpora in "
                      f"{time.perf_counter() - started:.1f} s")  # fmt: skip
            tracker = AccessTracker(store, cache, RetentionConfig(), metrics)
            for attempt in range(1, runs + 1):
                tracker.record([Hit(r, 1.0) for r in sample])
                own, children = cpu_split(os.getpid())
                ticker = Ticker()
                ticking = asyncio.create_task(ticker.run())
                started = time.perf_counter()
                flushed = await tracker.flush()
                wall = time.perf_counter() - started
                ticker.stop()
                await ticking
                lag = lag_summary(ticker.lags)
                own_after, children_after = cpu_split(os.getpid())
                started = time.perf_counter()
                for scope in scopes if cached else []:
                    await cache.corpus(scope)
                next_ms = 1000 * (time.perf_counter() - started)
                print(
                    f"run {attempt}: {flushed} flushed in {wall:.2f} s; CPU: this process"
                    f" {own_after - own:.2f} s, milvus-lite {children_after - children:.2f} s;"
                    f" loop lag p50 {lag['p50_ms']:.2f} ms, p99 {lag['p99_ms']:.2f} ms,"
                    f" max {lag['max_ms']:.2f} ms"
                    + (f"; then every owner's corpus: {next_ms:.1f} ms" if cached else "")
                )
        finally:
            await store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("store", type=Path, help="a seeded milvus-lite store file (copied)")
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--dim", type=int, default=384, help="the store's vector dimension")
    parser.add_argument(
        "--no-cache", action="store_true", help="flush without the owners' corpora cached"
    )
    args = parser.parse_args(argv)
    if not args.store.exists():
        parser.error(f"no store at {args.store} (seed one with scripts/bench_e2e.py)")
    asyncio.run(run(args.store, args.memories, args.runs, args.dim, not args.no_cache))


if __name__ == "__main__":
    main()
