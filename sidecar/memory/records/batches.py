"""How much one model or store call takes in bulk work (imports, migration, bulk
loads), and slicing a sequence into such calls."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

#: Texts per embedding call in bulk work.
EMBED_CHUNK = 256
#: Rows per upsert call: large enough to spread each call's fixed cost, and the size
#: milvus-lite loads fastest (docs/benchmarks.md, bench_ingest).
UPSERT_CHUNK = 500


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
