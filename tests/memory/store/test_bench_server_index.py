"""scripts/bench_server_index against the session's Milvus server: exact search finds the
exact answer, and the report has a row per index."""

from __future__ import annotations

import argparse
from pathlib import Path

from e2e.milvus_server import MilvusServer
from scripts.bench_server_index import run


async def test_flat_recall_is_exact_and_every_index_is_reported(
    milvus_server: MilvusServer, tmp_path: Path
) -> None:
    args = argparse.Namespace(users=5, per_user=40, queries=20, hnsw_ef=[16], json=None)
    report = await run(args, milvus_server.uri, milvus_server.version)
    flat, hnsw = report["results"]
    assert (flat["index"], hnsw["index"], hnsw["ef"]) == ("FLAT", "HNSW", 16)
    assert flat["recall_at_10"] == 1.0
    assert 0.0 <= hnsw["recall_at_10"] <= 1.0
    assert flat["p50_ms"] > 0
