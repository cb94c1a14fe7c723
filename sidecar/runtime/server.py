"""Start-up and shutdown: every long-lived object is built here, from the config,
and passed to whoever needs it (no module-level state anywhere).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from sidecar.admin.api import MemoryApi
from sidecar.admin.http import AdminServer, build_admin_app
from sidecar.admin.service import MemoryAdmin
from sidecar.config import ExtractionConfig, SidecarConfig
from sidecar.errors import SidecarError
from sidecar.extproc.chat import ChatDeps
from sidecar.extproc.service import ExternalProcessorService, ProfileRouter
from sidecar.llm import LLMClient
from sidecar.memory.embedding.factory import build_embedder
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.model.records import Scope
from sidecar.memory.read.corpus_cache import CorpusCache
from sidecar.memory.read.query_cache import QueryVectorCache
from sidecar.memory.read.retrieval.registry import build_retrievers
from sidecar.memory.read.service import MemoryService
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.write.access import AccessTracker
from sidecar.memory.write.dedup import DedupJudge
from sidecar.memory.write.enrich import Enricher
from sidecar.memory.write.extraction import FactExtractor
from sidecar.memory.write.hierarchy import Hierarchy
from sidecar.memory.write.host_locks import HostLocks, host_locks_for
from sidecar.memory.write.queue import WriteQueue
from sidecar.memory.write.retention import Retention
from sidecar.memory.write.writer import KeyedLocks, MemoryWriter
from sidecar.metrics import Metrics
from sidecar.runtime.gc_control import GCControl
from sidecar.runtime.loop_lag import LoopLagMonitor
from sidecar.runtime.relay import RelayClient, RelayPeers, RelayServer

log = logging.getLogger(__name__)

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"


@dataclass(slots=True)
class Components:
    """The memory layer, usable without Envoy (admin API, eval, benchmarks)."""

    config: SidecarConfig
    metrics: Metrics
    embedder: Embedder
    store: MemoryStore
    llm: LLMClient
    memory: MemoryService
    writer: MemoryWriter
    queue: WriteQueue
    #: False when the embedder was handed in: its owner closes it.
    owns_embedder: bool = True
    #: The write path's enricher (with the categorizer wired in, when enabled).
    enricher: Enricher | None = None
    #: The category tree builder; None when ``hierarchy.enabled`` is off.
    hierarchy: Hierarchy | None = None
    #: The per-user cap (scheduled by :class:`Sidecar`, or ``prune(owner)`` on demand).
    retention: Retention | None = None
    #: Retrieval access counts; None when ``retention.track_access`` is off.
    access: AccessTracker | None = None
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
        llm = LLMClient(config.llm, metrics)
        cache = CorpusCache(store, config.cache, metrics)
        memory = MemoryService(
            store,
            embedder,
            cache,
            build_retrievers(),
            metrics,
            llm=llm,
            query_vectors=QueryVectorCache.from_config(config.embedding),
            debug_content=config.logging.debug_content,
        )
        cache.on_user_invalidated = memory.forget_user  # a forget, here or a peer's
        for name in config.profile_names():
            profile = config.profile(name)
            if profile is not None:
                memory.retriever(profile.retrieval.strategy)  # unknown -> ConfigError now
        # One lock per owner for every read-modify-write of their rows: turns being
        # written, retention pruning, access-count flushes, the category tree's
        # writes (and, with several workers, across the host's processes).
        owner_host, tree_host = host_locks_for(config), host_locks_for(config, "tree-locks")
        locks = KeyedLocks(owner_host)
        hierarchy = (
            Hierarchy(
                store,
                cache,
                embedder,
                config.hierarchy,
                write_locks=locks,
                tree_locks=KeyedLocks(tree_host),
            )
            if config.hierarchy.enabled
            else None
        )
        enricher = Enricher(cache, config.enrichment, hierarchy)
        retention = Retention(
            store,
            cache,
            config.retention,
            metrics,
            locks=locks,
            # Every cache has reloaded in full since (see sidecar.memory.store.tombstones).
            purge_after_ms=int(2 * config.cache.full_reload_s * 1000),
        )
        access = (
            AccessTracker(store, cache, config.retention, metrics)
            if config.retention.track_access
            else None
        )

        def extraction_config(profile: str) -> ExtractionConfig:
            found = config.profile(profile)
            return (found or config.defaults).extraction

        writer = MemoryWriter(
            store,
            embedder,
            FactExtractor(llm, metrics),
            DedupJudge(llm, metrics),
            enricher,
            cache,
            metrics,
            extraction_config=extraction_config,
            max_content_chars=config.store.max_content_chars,
            locks=locks,
            on_stored=retention.note,
            other_writers=config.shares_store,
        )
        relay_server: RelayServer | None = None
        own_socket, peers = config.cache.relay_socket, config.cache.relay_peers
        clients = [RelayClient(path, metrics) for path in peers]
        if writer_process:
            queue = WriteQueue(writer, config.write_queue, metrics, role="claimer")
            if own_socket:  # its worker's: wake-ups come from there
                clients.insert(0, RelayClient(own_socket, metrics, on_wake=queue.wake))
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
        relay_peers = RelayPeers(clients) if clients else None
        cache.mirror = relay_peers
        lag_interval = config.server.loop_lag_interval_s
        loop_lag = LoopLagMonitor(metrics.loop_lag, lag_interval) if lag_interval else None
        return cls(
            config,
            metrics,
            embedder,
            store,
            llm,
            memory,
            writer,
            queue,
            owns_embedder,
            enricher,
            hierarchy,
            retention,
            access,
            tuple(h for h in (owner_host, tree_host) if h is not None),
            relay_server,
            relay_peers,
            loop_lag,
            GCControl(metrics.gc_pause, metrics.gc_collected, metrics.gc_frozen, config.server),
        )

    def start_write_upkeep(self) -> None:
        """The category tree's schedule and retention: run by the process that writes
        the turns (a worker, or its writer with ``write_queue.own_process``)."""
        if self.hierarchy is not None:
            self.hierarchy.start()
        if self.retention is not None:
            self.retention.start()

    async def stop_write_upkeep(self) -> None:
        """Before the last turns are drained: over-cap owners are pruned next time,
        a half-done evolve is repaired next time."""
        if self.retention is not None:
            await self.retention.stop()
        if self.hierarchy is not None:
            await self.hierarchy.stop()

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
        if self.access is not None:
            await self.access.stop()  # writes the accesses recorded so far
        await self.queue.close()
        if self.relay_peers is not None:
            await self.relay_peers.close()
        if self.relay_server is not None:
            await self.relay_server.close()
        await self.memory.close()
        await self.memory.cache.close()  # its refresher and loads use the store
        await self.llm.close()
        await self.store.close()
        if self.owns_embedder:
            await self.embedder.close()
        for host in self.host_locks:  # nothing of this process holds them any more
            host.close()


class Sidecar:
    """The running service: gRPC ext_proc + health, admin HTTP, write workers."""

    def __init__(self, components: Components) -> None:
        self.components = components
        config = components.config
        self._config = config
        self._health = health.aio.HealthServicer()
        deps = ChatDeps(
            memory=components.memory,
            queue=components.queue,
            metrics=components.metrics,
            debug_content=config.logging.debug_content,
            access=components.access,
        )
        self._service = ExternalProcessorService(
            ProfileRouter(config, deps),
            components.metrics,
            debug=config.logging.debug_content,
        )
        self._server: grpc.aio.Server | None = None
        self._admin: AdminServer | None = None
        self.port = 0

    @property
    def admin_port(self) -> int:
        return self._admin.port if self._admin else 0

    async def start(self) -> None:
        server_config = self._config.server
        limit = server_config.max_message_bytes
        self._server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                ("grpc.so_reuseport", 1 if server_config.reuse_port else 0),
            ]
        )
        pb_grpc.add_ExternalProcessorServicer_to_server(self._service, self._server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        address = f"{server_config.host}:{server_config.port}"
        self.port = self._server.add_insecure_port(address)
        if self.port == 0:
            raise SidecarError(f"cannot listen on {address}")
        if self.components.relay_server is not None:
            await self.components.relay_server.start(self._config.cache.relay_socket)
        if self.components.relay_peers is not None:
            self.components.relay_peers.start()
        await self.components.queue.start()  # opens the journal; resumes its turns
        if self.components.queue.writes:  # else its writer process runs it
            self.components.start_write_upkeep()
        if self.components.access is not None:
            self.components.access.start()
        self.components.start_stall_monitors()
        await self._server.start()
        for service in ("", EXT_PROC_SERVICE):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        if self._config.admin.enabled:
            admin = MemoryAdmin.from_components(
                self.components, journal=self.components.queue.journal
            )
            api = MemoryApi(admin, self._config.admin, self.components.metrics)
            app = build_admin_app(self.components.metrics, self.components.readiness, api)
            self._admin = AdminServer(self._config.admin, app)
            await self._admin.start()
        log.info(
            "listening grpc=%s:%d admin=%s store=%s",
            server_config.host,
            self.port,
            self.admin_port or "off",
            "file" if self._config.store.is_local_file else "server",
        )

    async def stop(self) -> None:
        """Graceful: NOT_SERVING, finish streams, drain the write queue, close."""
        await self._health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(self._config.server.shutdown_grace_s)
        if self.components.access is not None:
            await self.components.access.stop()  # no more requests: write the last accesses
        await self.components.stop_write_upkeep()
        drained = await self.components.queue.drain()
        if self.components.queue.writes:
            log.info("write queue %s", "drained" if drained else "not drained before the deadline")
        else:
            log.info("accepted turns are left to the writer process")
        if self._admin is not None:
            await self._admin.stop()
        await self.components.close()


def freeze_startup_objects() -> None:
    """Move everything allocated so far (the embedding model, torch, scikit-learn,
    the gRPC stack: millions of objects) out of the cyclic GC's reach. Measured in a
    soak: full collections otherwise paused the event loop for up to 145 ms, on the
    request path, to scan objects that live as long as the process."""
    gc.collect()
    gc.freeze()


async def serve(
    config: SidecarConfig,
    *,
    announce: Callable[[int, int], None] | None = None,
    supervisor_pid: int | None = None,
    worker: int | None = None,
) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully.

    ``announce(grpc_port, admin_port)`` replaces the ``SIDECAR_READY`` line (a worker
    tells its supervisor); with ``supervisor_pid`` the sidecar also stops when that
    process is gone."""
    if worker is not None:
        log.info("worker %d starting", worker)
    components = await Components.build(config)
    sidecar = Sidecar(components)
    await sidecar.start()
    freeze_startup_objects()
    if components.gc_control is not None:
        components.gc_control.freeze_survivors()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = None
    if supervisor_pid is not None:
        from sidecar.runtime.workers import watch_supervisor

        watcher = loop.create_task(watch_supervisor(supervisor_pid, stop))
    if announce is not None:
        announce(sidecar.port, sidecar.admin_port)
    else:
        print(f"SIDECAR_READY grpc_port={sidecar.port} admin_port={sidecar.admin_port}", flush=True)
    await stop.wait()
    if watcher is not None:
        watcher.cancel()
    log.info("shutting down")
    await sidecar.stop()
