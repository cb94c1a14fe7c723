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
from collections.abc import Mapping
from typing import Any

from e2e.stack import merge_settings, parse_settings
from sidecar.config import config_from_mapping
from sidecar.memory.records.records import MemoryRecord, content_hash, memory_id
from sidecar.memory.write.rows.bulk import bulk_load
from sidecar.runtime.components import Components

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

#: Owners handed to one bulk load (it overlaps their enrichment and upserts).
USERS_PER_LOAD = 10


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


async def seed(
    uri: str,
    users: int,
    per_user: int,
    *,
    enrich: bool = True,
    first_user: int = 0,
    settings: Mapping[str, Any] | None = None,
) -> float:
    """Store ``users * per_user`` synthetic memories in ``uri`` through the bulk loader
    (with the write path's enrichment: links and categories, unless ``enrich`` is off).
    ``settings`` override the config the loader runs with (e.g. the embedding device)."""
    mapping: dict[str, Any] = {"admin": {"enabled": False}, "hierarchy": {"schedule_s": 0}}
    merge_settings(mapping, settings or {})
    merge_settings(mapping, {"store": {"uri": uri}})
    config = config_from_mapping(mapping, env={})
    components = await Components.build(config)
    started = time.perf_counter()
    try:
        # A few owners per load: the loader enriches one owner while it stores another.
        for first in range(first_user, first_user + users, USERS_PER_LOAD):
            last = min(first + USERS_PER_LOAD, first_user + users)
            records = [
                MemoryRecord(
                    id=memory_id(user_name(u), text),
                    user_id=user_name(u),
                    content=text,
                    source="seed",
                    created_at=1_700_000_000_000 + i,
                    updated_at=1_700_000_000_000 + i,
                    content_hash=content_hash(text),
                )
                for u in range(first, last)
                for i, text in enumerate(synthetic_texts(u, per_user))
            ]
            await bulk_load(
                records,
                embedder=components.embedder,
                enricher=components.write.enricher if enrich else None,
                writes=components.write.writes,
            )
        await components.store.flush()
    finally:
        await components.close()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uri", required=True)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--per-user", type=int, default=1000)
    parser.add_argument(
        "--first-user", type=int, default=0, help="index of the first user (to resume a seed)"
    )
    parser.add_argument("--no-enrich", action="store_true", help="skip links and categories")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="config override for the loader, e.g. embedding.device=cuda (repeatable)",
    )
    args = parser.parse_args(argv)
    try:
        settings = parse_settings(args.set)
    except ValueError as exc:
        parser.error(str(exc))
    elapsed = asyncio.run(
        seed(
            args.uri,
            args.users,
            args.per_user,
            enrich=not args.no_enrich,
            first_user=args.first_user,
            settings=settings,
        )
    )
    print(f"seeded {args.users * args.per_user} memories in {elapsed:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
