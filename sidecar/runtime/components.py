"""The composition root: every long-lived object of the memory layer is built here,
from the config, and passed to whoever needs it (no module-level state anywhere).
The admin API, ``sidecar eval``, the benchmarks and a writer process use these
components without the gRPC server.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sidecar.admin.service import MemoryAdmin
from sidecar.config import ExtractionConfig, SidecarConfig
from sidecar.errors import SidecarError, StoreError
from sidecar.llm import LLMClient
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.embedding.factory import build_embedder
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.read.deep.search import DeepSearcher
from sidecar.memory.read.injections import InjectionLog
from sidecar.memory.read.pipeline import QueryCaches, RequestPipeline
from sidecar.memory.read.query_cache import QueryVectorCache
from sidecar.memory.read.retrieval.registry import build_retrievers, memory_readers, preparer
from sidecar.memory.read.rewrite.rewriter import QueryRewriter
from sidecar.memory.read.service import MemoryService
from sidecar.memory.records.records import Scope
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.write.rows.enrich import Enricher
from sidecar.memory.write.rows.gateway import NotedOwners, WriteGateway
from sidecar.memory.write.rows.locks import HostLocks, KeyedLocks, host_locks_for
from sidecar.memory.write.tree.hierarchy import Hierarchy
from sidecar.memory.write.turns.dedup import DedupJudge
from sidecar.memory.write.turns.extraction import FactExtractor
from sidecar.memory.write.turns.journal import TurnJournal
from sidecar.memory.write.turns.queue import Doorbell, WriteQueue
from sidecar.memory.write.turns.writer import MemoryWriter
from sidecar.memory.write.upkeep.access import AccessTracker
from sidecar.memory.write.upkeep.consolidation import Consolidator
from sidecar.memory.write.upkeep.consolidation import scheduled as consolidation_scheduled
from sidecar.memory.write.upkeep.retention import Retention
from sidecar.metrics import Metrics
from sidecar.runtime.gc_control import GCControl
from sidecar.runtime.loop_lag import LoopLagMonitor
from sidecar.runtime.relay import RelayClient, RelayPeers, RelayServer


@dataclass(slots=True, kw_only=True)
class ReadSide:
    """The request path and the plain search."""

    #: The plain search (admin, eval, benchmarks).
    memory: MemoryService
    #: The request path's front door.
    pipeline: RequestPipeline


@dataclass(slots=True, kw_only=True)
class WriteSide:
    """The write path: rows, turns and their upkeep."""

    #: The write path's front door for rows: every writer stores through it.
    writes: WriteGateway
    writer: MemoryWriter
    #: The turns' front door (the durable queue).
    queue: WriteQueue
    #: Merges a user's memories that state the same fact (scheduled and on demand).
    consolidator: Consolidator
    #: The write path's enricher (with the categorizer wired in, when enabled).
    enricher: Enricher
    #: The category tree builder; None when ``hierarchy.enabled`` is off.
    hierarchy: Hierarchy | None = None
    #: The per-user cap (scheduled by :class:`Sidecar`, or ``prune(owner)`` on demand).
    retention: Retention | None = None
    #: Retrieval access counts (recorded by the request path, flushed here); None
    #: when ``retention.track_access`` is off.
    access: AccessTracker | None = None


@dataclass(slots=True, kw_only=True)
class Components:
    """The memory layer, usable without Envoy (admin API, eval, benchmarks): what
    both paths share, and each path's half (:attr:`read`, :attr:`write`)."""

    config: SidecarConfig
    metrics: Metrics
    embedder: Embedder
    store: MemoryStore
    llm: LLMClient
    read: ReadSide
    write: WriteSide
    #: False when the embedder was handed in: its owner closes it.
    owns_embedder: bool = True
    #: Host-wide lock files held open (``server.workers`` > 1), closed last.
    host_locks: tuple[HostLocks, ...] = ()
    #: Where this worker's cache takes the host's other processes' writes (the
    #: cache relay; a supervised worker, not a writer process).
    relay_server: RelayServer | None = None
    #: Who this process's writes are told to (the other workers; a writer process:
    #: every worker, its own asked for wake-ups).
    relay_peers: RelayPeers | None = None
    #: The event loop's lag (``server.loop_lag_interval_s``; None when 0), started
    #: with the process's serving (:meth:`Sidecar.start`, a writer process).
    loop_lag: LoopLagMonitor | None = None
    #: The garbage collector's pauses, and freezing what survives full collections
    #: (:mod:`sidecar.runtime.gc_control`), from when the loop's lag is observed.
    gc_control: GCControl | None = None

    @classmethod
    async def build(
        cls,
        config: SidecarConfig,
        *,
        metrics: Metrics | None = None,
        embedder: Embedder | None = None,
        writer_process: bool = False,
    ) -> Components:
        """``writer_process``: the components of a writer of its own
        (``write_queue.own_process``), which writes the turns its worker accepts."""
        metrics = metrics or Metrics()
        owns_embedder = embedder is None
        if embedder is None:
            loop = asyncio.get_running_loop()
            embedder = await loop.run_in_executor(None, build_embedder, config.embedding)
        store = await MemoryStore.open(config.store, embedder.dim, metrics)
        needs_full_text = sorted(
            name
            for name in config.profile_names()
            if (profile := config.profile(name)) is not None
            and profile.retrieval.strategy == "bm25-milvus"
        )
        if needs_full_text and not store.full_text:
            await store.close()
            raise StoreError(
                f"profiles {', '.join(needs_full_text)} use the bm25-milvus strategy, which "
                f"needs Milvus' BM25 function; the store is {store.capabilities} and its "
                "collection has none (use bm25 or default: the same BM25, in process)"
            )
        llm = LLMClient(config.llm, metrics)
        # The cache relay's clients (the host's other processes), before the cache
        # that tells them of this process's writes. A writer process is woken over
        # its worker's relay connection when the worker accepts a turn.
        bell = Doorbell(keep=config.write_queue.workers)
        own_socket, peer_sockets = config.cache.relay_socket, config.cache.relay_peers
        clients = [RelayClient(path, metrics) for path in peer_sockets]
        if writer_process and own_socket:
            clients.insert(0, RelayClient(own_socket, metrics, on_wake=bell.ring))
        relay_peers = RelayPeers(clients) if clients else None
        # What the request path keeps of users' questions goes when a user is
        # forgotten, here or (over the relay) by a peer.
        caches = QueryCaches(
            QueryRewriter(llm, metrics),
            QueryVectorCache.from_config(config.embedding),
            InjectionLog(config.admin.explain_max_users) if config.explains_injections else None,
        )
        retrievers = build_retrievers()
        cache = CorpusCache(
            store,
            config.cache,
            metrics,
            mirror=relay_peers,
            on_user_invalidated=caches.forget_user,
            # A writer process serves no reads: the stages' values are not its to read.
            readers=() if writer_process else memory_readers(),
            # A new snapshot is readied for the default profile's ranking before the
            # request that reads it (a writer process serves none).
            prepare=None if writer_process else preparer(retrievers, config.defaults.retrieval),
        )
        memory = MemoryService(store, embedder, cache, retrievers, metrics)
        for name in config.profile_names():
            profile = config.profile(name)
            if profile is not None:
                memory.retriever(profile.retrieval.strategy)  # unknown -> ConfigError now
        access = (
            AccessTracker(store, cache, config.retention, metrics)
            if config.retention.track_access
            else None
        )
        pipeline = RequestPipeline(
            memory,
            caches,
            DeepSearcher(llm, metrics, debug_content=config.logging.debug_content),
            metrics,
            access=access,
        )
        # One lock per owner for every read-modify-write of their rows: turns being
        # written, retention pruning, the category tree's writes, admin edits (and,
        # with several workers, across the host's processes).
        owner_host, tree_host = host_locks_for(config), host_locks_for(config, "tree-locks")
        # The scheduled jobs' owners to look at, told by the gateway.
        to_prune = NotedOwners(scheduled=config.retention.prune_interval_s > 0)
        to_consolidate = NotedOwners(scheduled=consolidation_scheduled(config.consolidation))
        writes = WriteGateway(
            store,
            cache,
            max_content_chars=config.store.max_content_chars,
            locks=KeyedLocks(owner_host),
            on_stored=(to_prune.note, to_consolidate.note),
            sole_writer=not config.shares_store,
        )
        hierarchy = (
            Hierarchy(
                store,
                writes,
                cache,
                embedder,
                config.hierarchy,
                tree_locks=KeyedLocks(tree_host),
            )
            if config.hierarchy.enabled
            else None
        )
        enricher = Enricher(cache, config.enrichment, hierarchy)
        retention = Retention(
            store,
            writes,
            config.retention,
            metrics,
            noted=to_prune,
            # Every cache has reloaded in full since (see sidecar.memory.store.tombstones).
            purge_after_ms=int(2 * config.cache.full_reload_s * 1000),
        )

        consolidator = Consolidator(
            store, writes, config.consolidation, metrics, noted=to_consolidate
        )

        def extraction_config(profile: str) -> ExtractionConfig:
            found = config.profile(profile)
            return (found or config.defaults).extraction

        writer = MemoryWriter(
            writes,
            embedder,
            FactExtractor(llm, metrics),
            DedupJudge(llm, metrics),
            enricher,
            cache,
            metrics,
            extraction_config=extraction_config,
            other_writers=config.shares_store,
        )
        relay_server: RelayServer | None = None
        if writer_process:
            queue = WriteQueue(writer, config.write_queue, metrics, role="claimer", bell=bell)
        else:
            relay_server = RelayServer(cache, metrics) if own_socket else None
            if config.write_queue.own_process:
                queue = WriteQueue(
                    writer,
                    config.write_queue,
                    metrics,
                    role="appender",
                    on_accept=relay_server.wake if relay_server is not None else None,
                )
            else:
                queue = WriteQueue(writer, config.write_queue, metrics)
        lag_interval = config.server.loop_lag_interval_s
        loop_lag = LoopLagMonitor(metrics.loop_lag, lag_interval) if lag_interval else None
        return cls(
            config=config,
            metrics=metrics,
            embedder=embedder,
            store=store,
            llm=llm,
            read=ReadSide(memory=memory, pipeline=pipeline),
            write=WriteSide(
                writes=writes,
                writer=writer,
                queue=queue,
                consolidator=consolidator,
                enricher=enricher,
                hierarchy=hierarchy,
                retention=retention,
                access=access,
            ),
            owns_embedder=owns_embedder,
            host_locks=tuple(h for h in (owner_host, tree_host) if h is not None),
            relay_server=relay_server,
            relay_peers=relay_peers,
            loop_lag=loop_lag,
            gc_control=GCControl(
                metrics.gc_pause, metrics.gc_collected, metrics.gc_frozen, config.server
            ),
        )

    def memory_admin(self, *, journal: TurnJournal | None = None) -> MemoryAdmin:
        """The admin service (API, console, CLI) over these components."""
        return MemoryAdmin(
            config=self.config,
            store=self.store,
            embedder=self.embedder,
            memory=self.read.memory,
            writes=self.write.writes,
            writer=self.write.writer,
            enricher=self.write.enricher,
            metrics=self.metrics,
            journal=journal,
            tree_lock=self.write.hierarchy.lock if self.write.hierarchy is not None else None,
            consolidator=self.write.consolidator,
            injections=self.read.pipeline.caches.injections,
        )

    def start_write_upkeep(self) -> None:
        """The category tree's schedule, retention and consolidation: run by the
        process that writes the turns (a worker, or its writer with
        ``write_queue.own_process``)."""
        if self.write.hierarchy is not None:
            self.write.hierarchy.start()
        if self.write.retention is not None:
            self.write.retention.start()
        self.write.consolidator.start()

    async def stop_write_upkeep(self) -> None:
        """Before the last turns are drained: over-cap owners are pruned next time,
        a half-done evolve is repaired next time."""
        await self.write.consolidator.stop()
        if self.write.retention is not None:
            await self.write.retention.stop()
        if self.write.hierarchy is not None:
            await self.write.hierarchy.stop()

    async def readiness(self) -> dict[str, bool]:
        checks = {"store": True, "embedder": True}
        try:
            await self.store.count(build_filter(scope=Scope("__readiness__")))
        except SidecarError:
            checks["store"] = False
        try:
            await self.embedder.embed(["ready"])
        except SidecarError:
            checks["embedder"] = False
        return checks

    def start_stall_monitors(self) -> None:
        """The event loop's lag and the garbage collector (when serving)."""
        if self.loop_lag is not None:
            self.loop_lag.start()
        if self.gc_control is not None:
            self.gc_control.start()

    async def close(self) -> None:
        if self.loop_lag is not None:
            await self.loop_lag.stop()
        if self.gc_control is not None:
            self.gc_control.stop()
        await self.stop_write_upkeep()
        if self.write.access is not None:
            await self.write.access.stop()  # writes the accesses recorded so far
        await self.write.queue.close()
        if self.relay_peers is not None:
            await self.relay_peers.close()
        if self.relay_server is not None:
            await self.relay_server.close()
        await self.read.pipeline.close()
        await self.read.memory.cache.close()  # its refresher and loads use the store
        await self.llm.close()
        await self.store.close()
        if self.owns_embedder:
            await self.embedder.close()
        for host in self.host_locks:  # nothing of this process holds them any more
            host.close()
