"""``sidecar store migrate``: copy every row of one collection into another.

The schema version lives in the collection's description (``SCHEMA_TAG``); a
collection of another version, or with other store settings fixed at creation
(``store.partition_key``, the vector dimension), cannot be opened. Migration reads
the old collection whatever its schema (:meth:`MemoryStore.read_collection`: known
fields read, missing ones defaulted), creates the new one with this version's schema
and the configured index / partition key, and upserts the rows in batches — ids,
links, categories, statuses and times unchanged. Vectors are kept unless their
dimension differs from the configured model's (or ``reembed``): those rows are
embedded again. The old collection is left as it is; point ``store.collection`` at
the new one and restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sidecar.config import SidecarConfig
from sidecar.errors import InvalidInput
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.embedding_text import embedding_text
from sidecar.memory.records.batches import EMBED_CHUNK, UPSERT_CHUNK, chunks
from sidecar.memory.records.embeddings import Embedding, stacked
from sidecar.memory.records.records import MemoryRecord, NodeType, as_vector
from sidecar.memory.records.vectors import centroid
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class MigrationReport:
    source: str
    source_schema: str
    target: str
    rows: int
    embedded: int
    #: Rows the target holds afterwards (equal to ``rows`` for a fresh target).
    target_rows: int
    seconds: float


async def fill_embeddings(
    records: Sequence[MemoryRecord], embedder: Embedder, *, category_vectors: str = "centroid"
) -> list[MemoryRecord]:
    """``records`` with every missing embedding filled: memories embedded (in
    batches); categories get the normalised centroid of their members' vectors
    (``category_vectors="centroid"``, as the hierarchy builds them) or, without
    members or with ``"summary"``, the embedding of their summary text."""
    out = list(records)
    for wanted in (NodeType.MEMORY, NodeType.CATEGORY):
        missing = [i for i, r in enumerate(out) if r.embedding is None and r.node_type == wanted]
        if wanted == NodeType.CATEGORY and category_vectors == "centroid":
            members: dict[str, list[Embedding]] = {}
            for record in out:
                if record.node_type == NodeType.MEMORY and record.embedding is not None:
                    members.setdefault(record.category_id, []).append(record.embedding)
            still = []
            for i in missing:
                member_vectors = members.get(out[i].id)
                if member_vectors:
                    mean = centroid(stacked(member_vectors))
                    out[i] = out[i].with_changes(embedding=as_vector(mean))
                else:
                    still.append(i)
            missing = still
        for batch in chunks(missing, EMBED_CHUNK):
            vectors = await embedder.embed([embedding_text(out[i].content) or " " for i in batch])
            for i, vector in zip(batch, vectors, strict=True):
                out[i] = out[i].with_changes(embedding=as_vector(vector))
    return out


async def migrate_collection(
    config: SidecarConfig,
    embedder: Embedder,
    metrics: Metrics,
    *,
    target: str,
    source: str | None = None,
    reembed: bool = False,
    progress: Progress | None = None,
) -> MigrationReport:
    """Copy every row of ``source`` (default: ``store.collection``) into ``target``
    at the same store URI."""
    started = time.perf_counter()
    source = source or config.store.collection
    if source == target:
        raise InvalidInput("the target collection must differ from the source")
    schema, rows = await MemoryStore.read_collection(config.store, source, metrics)
    dim = embedder.dim
    kept = [
        r
        if r.embedding is not None and len(r.embedding) == dim and not reembed
        else r.with_changes(embedding=None)
        for r in rows
    ]
    embedded = sum(1 for r in kept if r.embedding is None)
    filled = await fill_embeddings(kept, embedder, category_vectors=config.hierarchy.embedding)
    target_config = config.store.model_copy(update={"collection": target})
    store = await MemoryStore.open(target_config, dim, metrics)
    try:
        done = 0
        for batch in chunks(filled, UPSERT_CHUNK):
            await store.upsert(batch)
            done += len(batch)
            if progress is not None:
                progress(done, len(filled))
        await store.flush()
        target_rows = 0
        for node_type in NodeType:  # every row is one of them (a filter is never empty)
            target_rows += await store.count(build_filter(node_type=node_type, status=None))
    finally:
        await store.close()
    return MigrationReport(
        source=source,
        source_schema=schema,
        target=target,
        rows=len(rows),
        embedded=embedded,
        target_rows=target_rows,
        seconds=round(time.perf_counter() - started, 3),
    )
