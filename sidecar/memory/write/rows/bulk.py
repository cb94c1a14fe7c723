"""Bulk loading: many memories at once through the write path's enrichment.

Used by ``sidecar eval`` (dataset ingestion), the benchmark seeders and imports.
Records without an embedding are embedded in batches; each owner's records then go
through :meth:`Enricher.enrich` (abstracts, persisted links, categories) exactly as
single writes do, and are written through the write gateway (upserted in chunks,
then the corpus cache, so the loaded memories are visible to this process at once);
two owners are in flight at a time, so one owner's enrichment overlaps the other's
upserts. Rows keep their own times (no stamping: an import restores them as they
were).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.embedding_text import embedding_text
from sidecar.memory.records.batches import EMBED_CHUNK, chunks
from sidecar.memory.records.records import MemoryRecord, as_vector
from sidecar.memory.write.rows.enrich import Enricher
from sidecar.memory.write.rows.gateway import WriteGateway

#: Owners enriched and stored at the same time.
OWNER_LANES = 2

Progress = Callable[[str, int], None]


@dataclass(frozen=True, slots=True)
class BulkStats:
    memories: int
    rows: int  # memories + category nodes + back-linked rows written
    owners: int
    embed_seconds: float
    #: Summed over owners; owners are loaded in parallel lanes, so these two can
    #: add up to more than the wall time.
    enrich_seconds: float
    store_seconds: float
    #: The whole load (embedding included).
    wall_seconds: float

    @property
    def seconds(self) -> float:
        return self.wall_seconds


async def bulk_load(
    records: Sequence[MemoryRecord],
    *,
    embedder: Embedder,
    enricher: Enricher | None,
    writes: WriteGateway,
    progress: Progress | None = None,
    topics: Mapping[str, str] | None = None,
) -> BulkStats:
    """Embed (where missing), enrich per owner (unless ``enricher`` is None) and store.
    ``topics`` (memory id -> topic name) files those memories under named topics."""
    started = time.perf_counter()
    missing = [i for i, r in enumerate(records) if r.embedding is None]
    filled = list(records)
    for batch in chunks(missing, EMBED_CHUNK):
        vectors = await embedder.embed([embedding_text(records[i].content) for i in batch])
        for i, vector in zip(batch, vectors, strict=True):
            filled[i] = records[i].with_changes(embedding=as_vector(vector))
        if progress is not None:
            progress("embed", len(batch))
    embedded = time.perf_counter()

    by_owner: Mapping[str, list[MemoryRecord]] = _group(filled)
    totals = {"enrich": 0.0, "store": 0.0, "rows": 0.0}
    owners = iter(sorted(by_owner))

    async def one(owner: str) -> None:
        step = time.perf_counter()
        mine = by_owner[owner]
        enriched = await enricher.enrich(owner, mine, topics) if enricher else list(mine)
        totals["enrich"] += time.perf_counter() - step
        step = time.perf_counter()
        await writes.put(enriched)
        totals["store"] += time.perf_counter() - step
        totals["rows"] += len(enriched)
        if progress is not None:
            progress("store", len(mine))

    async def lane() -> None:
        for owner in owners:  # the lanes share one iterator: each owner once
            await one(owner)

    # Owners in parallel lanes: one owner's enrichment (CPU, partly in threads)
    # overlaps another's upserts (the store's own process).
    lanes = [asyncio.ensure_future(lane()) for _ in range(min(OWNER_LANES, len(by_owner)))]
    try:
        await asyncio.gather(*lanes)
    finally:  # one lane failed (or the load was cancelled): stop the others too
        for task in lanes:
            task.cancel()
        await asyncio.gather(*lanes, return_exceptions=True)
    return BulkStats(
        memories=len(records),
        rows=int(totals["rows"]),
        owners=len(by_owner),
        embed_seconds=embedded - started,
        enrich_seconds=totals["enrich"],
        store_seconds=totals["store"],
        wall_seconds=time.perf_counter() - started,
    )


def _group(records: Sequence[MemoryRecord]) -> dict[str, list[MemoryRecord]]:
    grouped: dict[str, list[MemoryRecord]] = {}
    for record in records:
        grouped.setdefault(record.user_id, []).append(record)
    return grouped
