"""``scripts.bench_updates``' memory measure: what the corpus cache spends per
memory, in parts that add up, with a record's vector at the size of its float32
values (a tuple of Python floats took eight times that)."""

from __future__ import annotations

import numpy as np

from scripts import bench_updates
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.retrieval.registry import build_retrievers

DIM = 384


async def test_memory_per_memory_adds_up_and_vectors_are_packed() -> None:
    source, origin = bench_updates.turns(None)  # the synthetic turns
    assert origin.startswith("synthetic")
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((20, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = [Query(text, vectors[i]) for i, text in enumerate(bench_updates.QUESTIONS[:2])]
    bench = bench_updates.Bench(build_retrievers(), queries, DIM)
    memories = bench_updates.rows(300, source, vectors, rng)
    kb = await bench_updates.memory_per_memory(bench, memories)
    assert kb["memories"] == 300
    parts = kb["records"] + kb["memo"] + kb["snapshot"]
    assert abs(kb["total"] - parts) < 0.05
    # Each part is something: records hold their text and vector, the memo their
    # term ids, a snapshot its matrix row and postings.
    assert all(kb[name] > 0 for name in ("records", "memo", "snapshot"))
    # A record's vector is its 1.5 KB of float32 plus the record's text and fields.
    assert DIM * 4 / 1024 < kb["records"] < DIM * 4 / 1024 + 2.0
