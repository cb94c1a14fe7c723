#!/usr/bin/env python
"""FLAT against HNSW on a Milvus server: filtered recall and latency.

Every query the sidecar sends the store carries a per-user filter. This loads
``--users`` × ``--per-user`` memories (synthetic facts, embedded with the product's
model) into one collection per index on a Milvus server — ``--uri``, or one started
from the ``milvus`` wheel in a temporary directory — and asks ``--queries`` questions,
each restricted to one user, through the store adapter (``MemoryStore.search``, as
the request path and ``dense-milvus`` do). Reported per index: recall@10 against the
exact answer (cosine over that user's rows, computed here), and latency p50/p99.

    .venv/bin/python -m scripts.bench_server_index --json out/bench_server_index.json
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from e2e.milvus_server import MilvusServer, start_server
from e2e.seed import synthetic_texts, user_name
from scripts.benchlib import percentile, write_report
from sidecar.config import EmbeddingConfig, StoreConfig
from sidecar.memory.embedding.factory import build_local_embedder
from sidecar.memory.records.records import MemoryRecord, as_vector
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics

BASE_MS = 1_700_000_000_000
K = 10


async def embed_all(texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
    embedder = await asyncio.get_running_loop().run_in_executor(
        None, build_local_embedder, EmbeddingConfig()
    )
    try:
        parts = [await embedder.embed(texts[i : i + 256]) for i in range(0, len(texts), 256)]
    finally:
        await embedder.close()
    return np.concatenate(parts).astype(np.float32)


async def measure(
    uri: str,
    index: str,
    records: list[MemoryRecord],
    queries: list[tuple[str, np.ndarray[Any, np.dtype[np.float32]]]],
    truth: list[set[str]],
    *,
    ef: int,
) -> dict[str, Any]:
    config = StoreConfig(
        uri=uri,
        collection=f"bench_{index.lower()}_{int(time.time())}",
        index=index,
        hnsw_ef=max(ef, 1),
        timeout_s=60,
    )
    store = await MemoryStore.open(config, len(queries[0][1]), Metrics())
    try:
        started = time.perf_counter()
        for start in range(0, len(records), 500):
            await store.upsert(records[start : start + 500])
        await store.flush()
        load_s = time.perf_counter() - started
        await store.search(queries[0][1], where=build_filter(owner=queries[0][0]), limit=K)
        latencies: list[float] = []
        recalls: list[float] = []
        for (owner, vector), expected in zip(queries, truth, strict=True):
            began = time.perf_counter()
            hits = await store.search(vector, where=build_filter(owner=owner), limit=K)
            latencies.append((time.perf_counter() - began) * 1000)
            recalls.append(len({h.record.id for h in hits} & expected) / len(expected))
    finally:
        await store.close()
    return {
        "index": index,
        "ef": ef if index == "HNSW" else None,
        "recall_at_10": round(float(np.mean(recalls)), 3),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "load_s": round(load_s, 1),
    }


async def run(args: argparse.Namespace, uri: str, version: str) -> dict[str, Any]:
    texts: list[str] = []
    owners: list[str] = []
    for u in range(args.users):
        for text in synthetic_texts(u, args.per_user):
            texts.append(text)
            owners.append(user_name(u))
    rng = random.Random(11)
    asked = [
        (user_name(rng.randrange(args.users)), synthetic_texts(10_000 + q, 1)[0])
        for q in range(args.queries)
    ]
    vectors = await embed_all(texts + [text for _, text in asked])
    memory_vectors, query_vectors = vectors[: len(texts)], vectors[len(texts) :]
    records = [
        MemoryRecord(
            id=f"m{i:031d}",
            user_id=owner,
            content=text,
            embedding=as_vector(vector),
            created_at=BASE_MS + i,
            updated_at=BASE_MS + i,
        )
        for i, (owner, text, vector) in enumerate(zip(owners, texts, memory_vectors, strict=True))
    ]
    owner_array = np.asarray(owners)
    truth: list[set[str]] = []
    for (owner, _), vector in zip(asked, query_vectors, strict=True):
        rows = np.flatnonzero(owner_array == owner)
        best = rows[np.argsort(-(memory_vectors[rows] @ vector))[:K]]
        truth.append({records[int(i)].id for i in best})
    queries = [(owner, vector) for (owner, _), vector in zip(asked, query_vectors, strict=True)]
    results = [await measure(uri, "FLAT", records, queries, truth, ef=0)]
    for ef in args.hnsw_ef:
        results.append(await measure(uri, "HNSW", records, queries, truth, ef=ef))
    return {
        "server": version,
        "users": args.users,
        "per_user": args.per_user,
        "queries": args.queries,
        "results": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", help="a running Milvus server (default: start one)")
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--per-user", type=int, default=200)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--hnsw-ef", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    server: MilvusServer | None = None
    uri = args.uri
    version = "given"
    if uri is None:
        server = start_server(Path(tempfile.mkdtemp(prefix="bench-milvus-")))
        uri, version = server.uri, server.version
    try:
        report = asyncio.run(run(args, uri, version))
    finally:
        if server is not None:
            server.stop()
    print(
        f"\n{report['server']}: {args.users} users x {args.per_user} memories, "
        f"{args.queries} filtered queries"
    )
    print(f"{'index':6} {'ef':>4} {'recall@10':>10} {'p50 ms':>8} {'p99 ms':>8} {'load s':>7}")
    for row in report["results"]:
        print(
            f"{row['index']:6} {row['ef'] or '-':>4} {row['recall_at_10']:>10.3f} "
            f"{row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} {row['load_s']:>7.1f}"
        )
    write_report(args.json, report)


if __name__ == "__main__":
    main()
