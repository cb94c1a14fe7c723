"""Fill a store with synthetic memories for benchmarks (deterministic).

    python -m e2e.seed --uri data/bench/memory.db --users 10 --per-user 1000

Memories go through the same embedder and store adapter as the write path; the
texts are built from templates so every user has distinct, searchable facts.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time

from sidecar.config import EmbeddingConfig, StoreConfig
from sidecar.memory.embedder import build_embedder
from sidecar.memory.records import MemoryRecord, content_hash, memory_id
from sidecar.memory.store import MemoryStore
from sidecar.metrics import Metrics

SUBJECTS = [
    "favourite food",
    "favourite book",
    "home city",
    "job",
    "sister's name",
    "dog's name",
    "preferred editor",
    "gym routine",
    "favourite band",
    "allergy",
    "car",
    "commute",
    "favourite holiday spot",
    "phone model",
    "morning routine",
    "coffee order",
    "programming language",
    "favourite film",
    "hobby",
    "weekend plan",
]
VALUES = [
    "Lisbon",
    "pasta with pesto",
    "Dune",
    "nurse",
    "Ana",
    "Rex",
    "Neovim",
    "three times a week",
    "Radiohead",
    "peanuts",
    "a blue Volvo",
    "cycling",
    "the Alps",
    "Pixel",
    "yoga at 7",
    "flat white",
    "Rust",
    "Spirited Away",
    "pottery",
    "hiking",
    "Kyoto",
    "sourdough baking",
    "chess",
    "a red bike",
    "Oslo",
    "tea",
    "Go",
    "jazz piano",
    "running",
    "Madrid",
]


def synthetic_texts(user_index: int, count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed * 1_000_003 + user_index)
    texts = []
    for i in range(count):
        subject = rng.choice(SUBJECTS)
        value = rng.choice(VALUES)
        texts.append(f"User's {subject} is {value} (note {user_index}-{i}).")
    return texts


def user_name(index: int) -> str:
    return f"bench-user-{index:04d}"


async def seed(uri: str, users: int, per_user: int, batch: int = 512) -> float:
    embedder = build_embedder(EmbeddingConfig())
    store = await MemoryStore.open(StoreConfig(uri=uri), embedder.dim, Metrics())
    started = time.perf_counter()
    try:
        for u in range(users):
            user = user_name(u)
            texts = synthetic_texts(u, per_user)
            for start in range(0, len(texts), batch):
                chunk = texts[start : start + batch]
                vectors = await embedder.embed(chunk)
                await store.upsert(
                    [
                        MemoryRecord(
                            id=memory_id(user, text),
                            user_id=user,
                            content=text,
                            embedding=tuple(float(x) for x in vec),
                            source="seed",
                            created_at=1_700_000_000_000 + i,
                            updated_at=1_700_000_000_000 + i,
                            content_hash=content_hash(text),
                        )
                        for i, (text, vec) in enumerate(zip(chunk, vectors, strict=True))
                    ]
                )
        await store.flush()
    finally:
        await store.close()
        await embedder.close()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uri", required=True)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--per-user", type=int, default=1000)
    args = parser.parse_args(argv)
    elapsed = asyncio.run(seed(args.uri, args.users, args.per_user))
    print(f"seeded {args.users * args.per_user} memories in {elapsed:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
