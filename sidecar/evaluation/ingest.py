"""Loading a dataset into a fresh store, the way the write path stores memories.

The store is fresh for every run: by default a milvus-lite file in a temporary
directory (removed afterwards); with ``--store-uri`` a new collection ``eval_<random>``
at that URI (dropped afterwards). Memories keep their dataset ids, owners, groups,
visibility, sessions, times and links; they are embedded in batches with the
configured embedder and enriched per owner by the write path's
:class:`~sidecar.memory.write.rows.enrich.Enricher` (abstract, overview, similarity links,
categories), and the rows it returns are upserted.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sidecar.config import SidecarConfig, StoreConfig
from sidecar.errors import StoreError
from sidecar.evaluation.dataset import Dataset, visible
from sidecar.evaluation.progress import progress_bar
from sidecar.memory.embedding.factory import build_embedder
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import MemoryRecord, Scope, content_hash
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.store.schema import ACCESS_SUFFIX
from sidecar.memory.write.rows.bulk import bulk_load
from sidecar.runtime.components import Components

log = logging.getLogger(__name__)

EVAL_COLLECTION_PREFIX = "eval_"
#: Seconds to wait for a server store to show every ingested row.
VISIBLE_TIMEOUT_S = 60.0
#: The eval's private store sees no other writer: keep corpora for the whole run.
EVAL_CACHE_TTL_S = 1e9


@dataclass(frozen=True, slots=True)
class StorePlan:
    """Where this run's fresh store lives."""

    config: StoreConfig
    #: A temporary directory holding a milvus-lite file, removed afterwards.
    temp_dir: Path | None
    #: For the report (no credentials).
    description: str

    @property
    def drop_collection(self) -> bool:
        return self.temp_dir is None


def plan_store(base: StoreConfig, store_uri: str | None) -> StorePlan:
    """A temporary milvus-lite file, or ``store_uri`` (``config``: the config's own
    ``store.uri``) with a new ``eval_<random>`` collection."""
    collection = EVAL_COLLECTION_PREFIX + secrets.token_hex(6)
    if store_uri is None:
        temp_dir = Path(tempfile.mkdtemp(prefix="sidecar-eval-"))
        config = base.model_copy(
            update={
                "uri": str(temp_dir / "eval.db"),
                "collection": collection,
                "token": None,
                "db_name": "",
            }
        )
        return StorePlan(config, temp_dir, "temporary milvus-lite file (removed afterwards)")
    uri = base.uri if store_uri == "config" else store_uri
    config = base.model_copy(update={"uri": uri, "collection": collection})
    if "://" in uri:
        parts = urlsplit(uri)
        shown = f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"
    else:
        shown = uri
    return StorePlan(config, None, f"{shown}, collection {collection} (dropped afterwards)")


def with_llm_url(config: SidecarConfig, llm_url: str | None) -> SidecarConfig:
    """``config`` with its LLM at ``llm_url`` (``--llm-url``); itself without one."""
    if not llm_url:
        return config
    return config.model_copy(update={"llm": config.llm.model_copy(update={"base_url": llm_url})})


@asynccontextmanager
async def eval_embedder(config: SidecarConfig, given: Embedder | None) -> AsyncIterator[Embedder]:
    """``given``, or the configured embedder built for this run and closed after it."""
    if given is not None:
        yield given
        return
    loop = asyncio.get_running_loop()
    built = await loop.run_in_executor(None, build_embedder, config.embedding)
    try:
        yield built
    finally:
        await built.close()


@asynccontextmanager
async def write_path_environment(
    config: SidecarConfig, embedder: Embedder, prefix: str
) -> AsyncIterator[tuple[SidecarConfig, EvalEnvironment]]:
    """Components on a fresh store whose write queue journals to a scratch file (a
    temporary directory named ``prefix``…, removed afterwards); with the config they
    run on."""
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        journal = str(Path(scratch) / "journal.sqlite3")
        written = config.model_copy(
            update={"write_queue": config.write_queue.model_copy(update={"journal_path": journal})}
        )
        async with eval_environment(written, embedder) as env:
            yield written, env


def describe_llm(config: SidecarConfig, components: Components) -> str:
    """What extracts and judges in a write-path evaluation, for its report."""
    if components.llm.configured:
        return f"the LLM at {config.llm.base_url} (model {config.llm.model})"
    return "no LLM: the heuristic extractor and the rule judge"


@dataclass(slots=True)
class EvalEnvironment:
    components: Components
    store: StorePlan


@asynccontextmanager
async def eval_environment(
    config: SidecarConfig, embedder: Embedder, *, store_uri: str | None = None
) -> AsyncIterator[EvalEnvironment]:
    """Components on a fresh store; afterwards the store is closed and dropped or
    removed. ``embedder`` stays open (its owner closes it)."""
    plan = plan_store(config.store, store_uri)
    try:
        eval_config = config.model_copy(
            update={
                "store": plan.config,
                "cache": config.cache.model_copy(update={"ttl_s": EVAL_CACHE_TTL_S}),
            }
        )
        components = await Components.build(eval_config, embedder=embedder)
        try:
            yield EvalEnvironment(components, plan)
        finally:
            try:
                if plan.drop_collection:
                    await _drop_collection(components.store, plan.config.collection)
            finally:
                await components.close()
                if plan.temp_dir is not None:
                    await _release_local_server(plan.config.uri)
    finally:
        if plan.temp_dir is not None:
            shutil.rmtree(plan.temp_dir, ignore_errors=True)


async def _release_local_server(path: str) -> None:
    """Stop the milvus-lite server process of this run's private file.

    milvus-lite keeps one server process per file until the Python process exits,
    even after every client closed it; a process that evaluates many times (tests,
    tuning loops) would otherwise keep one per run.
    """
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:
        return
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, server_manager_instance.release_server, path)
    except Exception as exc:  # best effort: the process ends with ours anyway
        log.warning("could not stop the eval's milvus-lite server: %s", type(exc).__name__)


async def _drop_collection(store: MemoryStore, collection: str) -> None:
    if not collection.startswith(EVAL_COLLECTION_PREFIX):  # never anything but our own
        raise StoreError(f"refusing to drop collection {collection!r}")
    # MemoryStore has no drop (the service never drops a collection); this run
    # created this one, so it removes it with the store's own client.
    client = store._client
    loop = asyncio.get_running_loop()
    for name in (collection, collection + ACCESS_SUFFIX):
        try:
            await loop.run_in_executor(None, client.drop_collection, name)
        except Exception as exc:  # best effort; pymilvus raises many types
            log.warning("could not drop eval collection %s: %s", name, type(exc).__name__)


@dataclass(frozen=True, slots=True)
class IngestStats:
    memories: int
    #: Rows written: the memories, plus category nodes a categorizer added.
    rows: int
    owners: int
    seconds: float
    embed_seconds: float
    enrich_seconds: float
    store_seconds: float


async def ingest(
    dataset: Dataset, env: EvalEnvironment, *, progress: bool = False, topics: bool = True
) -> IngestStats:
    """Embed, enrich and store every memory of ``dataset``; then wait until the store
    shows each query scope exactly its visible memories."""
    components = env.components
    started = time.perf_counter()
    max_chars = components.config.store.max_content_chars
    records = [
        MemoryRecord(
            id=memory.id,
            user_id=memory.user_id,
            content=memory.content[:max_chars],
            group_id=memory.group_id,
            visibility=memory.visibility,
            related_ids=memory.related_ids,
            source="eval",
            session_id=memory.session_id,
            created_at=memory.created_at,
            updated_at=memory.created_at,
            content_hash=content_hash(memory.content[:max_chars]),
        )
        for memory in dataset.memories
    ]
    bar = progress_bar(2 * len(records), "ingesting memories", enabled=progress, unit="mem")
    cache = components.read.memory.cache

    def advance(_stage: str, done: int) -> None:
        bar.update(done)

    try:
        stats = await bulk_load(
            records,
            embedder=components.embedder,
            enricher=components.write.enricher,
            writes=components.write.writes,
            progress=advance,
            topics={m.id: m.cluster for m in dataset.memories if m.cluster} if topics else None,
        )
    finally:
        bar.close()
    rows = stats.rows
    enrich_seconds = stats.enrich_seconds
    store_seconds = stats.store_seconds
    step = time.perf_counter()
    cache.clear()
    await _wait_visible(dataset, components)
    store_seconds += time.perf_counter() - step
    log.info(
        "ingested %d memories (%d rows) in %.1fs", len(records), rows, time.perf_counter() - started
    )
    return IngestStats(
        memories=len(records),
        rows=rows,
        owners=stats.owners,
        seconds=time.perf_counter() - started,
        embed_seconds=stats.embed_seconds,
        enrich_seconds=enrich_seconds,
        store_seconds=store_seconds,
    )


async def _wait_visible(dataset: Dataset, components: Components) -> None:
    """Every query scope's corpus must hold exactly the memories it may see (a server
    store shows writes after a short delay; milvus-lite at once)."""
    scopes = sorted({q.scope for q in dataset.queries}, key=lambda s: (s.user_id, s.group_ids))
    expected = {
        scope: sum(
            1 for m in dataset.memories if visible(m.user_id, m.group_id, m.visibility, scope)
        )
        for scope in scopes
    }
    deadline = time.monotonic() + VISIBLE_TIMEOUT_S
    cache = components.read.memory.cache
    while True:
        short: list[tuple[Scope, int]] = []
        for scope in scopes:
            size = (await cache.corpus(scope)).size
            if size != expected[scope]:
                short.append((scope, size))
        if not short:
            return
        if time.monotonic() > deadline:
            scope, size = short[0]
            raise StoreError(
                f"the eval store shows {size} memories to user {scope.user_id!r}, "
                f"expected {expected[scope]} ({len(short)} scopes differ)"
            )
        await asyncio.sleep(0.5)
        cache.clear()
