#!/usr/bin/env python
"""How long store reads and writes hold the event loop: its lag while the store
works, side by side with its lag while nothing does, in one run.

A timer due every millisecond runs on the event loop while the store reads
``--rows`` rows of one owner with their vectors and writes ``--write`` of them back
(what a corpus cache load, an access-count flush or retention does), ``--iterations``
times, against a milvus-lite file in a temporary directory. How much later than due
the timer ran is how long something held the loop that every request of the
process shares. Reported: the lag's p50, p99 and maximum, and the wall time of one
read and write; the baseline is the same timer for as long with the store idle.

    .venv/bin/python -m scripts.bench_loop_lag --rows 1000 --write 500
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from e2e.loop_ticker import Ticker, lag_summary
from scripts.benchlib import write_report
from sidecar.config import StoreConfig
from sidecar.memory.records.records import MemoryRecord, as_vector
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics

DIM = 384


async def measure(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="loop-lag-") as directory:
        store = await MemoryStore.open(
            StoreConfig(uri=str(Path(directory) / "m.db")), DIM, Metrics()
        )
        try:
            rng = np.random.default_rng(0)
            rows = [
                MemoryRecord(
                    id=f"m{i:06d}",
                    user_id="owner",
                    content=f"fact number {i} about the owner",
                    embedding=as_vector(rng.standard_normal(DIM).astype(np.float32)),
                    created_at=i,
                    updated_at=i,
                )
                for i in range(args.rows)
            ]
            for start in range(0, len(rows), 500):
                await store.upsert(rows[start : start + 500])

            walls: list[float] = []
            busy = Ticker()
            task = asyncio.create_task(busy.run())
            started = time.perf_counter()
            for _ in range(args.iterations):
                step = time.perf_counter()
                read = await store.scan(build_filter(owner="owner"), with_vectors=True)
                await store.upsert(read[: args.write])
                walls.append(time.perf_counter() - step)
            busy_s = time.perf_counter() - started
            busy.stop()
            await task

            idle = Ticker()
            task = asyncio.create_task(idle.run())
            await asyncio.sleep(busy_s)
            idle.stop()
            await task
        finally:
            await store.close()
    return {
        "rows": args.rows,
        "write": args.write,
        "iterations": args.iterations,
        "read_and_write_ms": 1000 * sorted(walls)[len(walls) // 2],
        "store_idle": lag_summary(idle.lags),
        "store_working": lag_summary(busy.lags),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--write", type=int, default=500)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    report = asyncio.run(measure(args))
    print(f"{args.rows} rows read with vectors, {args.write} written back, p50 "
          f"{report['read_and_write_ms']:.1f} ms per round")  # fmt: skip
    print(f"{'loop lag':<16}{'ticks':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for name in ("store_idle", "store_working"):
        row = report[name]
        assert isinstance(row, dict)
        print(
            f"{name:<16}{row['ticks']:>8.0f}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}"
            f"{row['max_ms']:>9.2f}"
        )
    write_report(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
