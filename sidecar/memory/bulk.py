"""Bulk loading: many memories at once through the write path's enrichment.

Used by ``sidecar eval`` (dataset ingestion), the benchmark seeders and imports.
Records without an embedding are embedded in batches; each owner's records then go
through :meth:`Enricher.enrich` (abstracts, persisted links, categories) exactly as
single writes do, and are upserted in chunks. The corpus cache is updated
(write-through) so the loaded memories are visible to this process at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from sidecar.memory.corpus import CorpusCache
from sidecar.memory.embedder import Embedder
from sidecar.memory.enrich import Enricher
from sidecar.memory.records import MemoryRecord
from sidecar.memory.store import MemoryStore

T = TypeVar("T")

EMBED_CHUNK = 256
UPSERT_CHUNK = 1000

Progress = Callable[[str, int], None]


@dataclass(frozen=True, slots=True)
class BulkStats:
    memories: int
    rows: int  # memories + category nodes + back-linked rows written
    owners: int
    embed_seconds: float
    enrich_seconds: float
    store_seconds: float

    @property
    def seconds(self) -> float:
        return self.embed_seconds + self.enrich_seconds + self.store_seconds


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def bulk_load(
    records: Sequence[MemoryRecord],
    *,
    embedder: Embedder,
    enricher: Enricher | None,
    store: MemoryStore,
    cache: CorpusCache,
    progress: Progress | None = None,
) -> BulkStats:
    """Embed (where missing), enrich per owner (unless ``enricher`` is None) and store."""
    started = time.perf_counter()
    missing = [i for i, r in enumerate(records) if r.embedding is None]
    filled = list(records)
    for batch in chunks(missing, EMBED_CHUNK):
        vectors = await embedder.embed([records[i].content for i in batch])
        for i, vector in zip(batch, vectors, strict=True):
            filled[i] = records[i].with_changes(embedding=tuple(float(x) for x in vector))
        if progress is not None:
            progress("embed", len(batch))
    embedded = time.perf_counter()

    by_owner: Mapping[str, list[MemoryRecord]] = _group(filled)
    enrich_seconds = store_seconds = 0.0
    rows = 0
    for owner in sorted(by_owner):
        step = time.perf_counter()
        enriched = await enricher.enrich(owner, by_owner[owner]) if enricher else by_owner[owner]
        enrich_seconds += time.perf_counter() - step
        step = time.perf_counter()
        for chunk in chunks(enriched, UPSERT_CHUNK):
            await store.upsert(chunk)
        cache.apply(enriched)
        store_seconds += time.perf_counter() - step
        rows += len(enriched)
        if progress is not None:
            progress("store", len(by_owner[owner]))
    return BulkStats(
        memories=len(records),
        rows=rows,
        owners=len(by_owner),
        embed_seconds=embedded - started,
        enrich_seconds=enrich_seconds,
        store_seconds=store_seconds,
    )


def _group(records: Sequence[MemoryRecord]) -> dict[str, list[MemoryRecord]]:
    grouped: dict[str, list[MemoryRecord]] = {}
    for record in records:
        grouped.setdefault(record.user_id, []).append(record)
    return grouped
