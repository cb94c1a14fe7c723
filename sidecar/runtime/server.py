"""The running service: the gRPC ext_proc and health server, the admin HTTP server and
the write path's background work, over the :class:`~sidecar.runtime.components.Components`;
:func:`serve` runs it until SIGTERM or SIGINT and then shuts down gracefully.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from sidecar.admin.api import MemoryApi
from sidecar.admin.http import AdminServer, build_admin_app
from sidecar.config import SidecarConfig
from sidecar.errors import SidecarError
from sidecar.extproc.chat import ChatDeps
from sidecar.extproc.service import ExternalProcessorService, ProfileRouter
from sidecar.runtime.components import Components
from sidecar.runtime.lifecycle import freeze_startup_objects, watch_supervisor

log = logging.getLogger(__name__)

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"


class Sidecar:
    """The running service: gRPC ext_proc + health, admin HTTP, write workers."""

    def __init__(self, components: Components) -> None:
        self.components = components
        config = components.config
        self._config = config
        self._health = health.aio.HealthServicer()
        deps = ChatDeps(
            memory=components.read.pipeline,
            queue=components.write.queue,
            metrics=components.metrics,
            debug_content=config.logging.debug_content,
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
        await self.components.write.queue.start()  # opens the journal; resumes its turns
        if self.components.write.queue.writes:  # else its writer process runs it
            self.components.start_write_upkeep()
        if self.components.write.access is not None:
            self.components.write.access.start()
        self.components.start_stall_monitors()
        await self._server.start()
        for service in ("", EXT_PROC_SERVICE):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        if self._config.admin.enabled:
            admin = self.components.memory_admin(journal=self.components.write.queue.journal)
            api = MemoryApi(admin, self._config.admin, self.components.metrics)
            app = build_admin_app(self.components.metrics, self.components.readiness, api)
            socket = self._config.admin.socket_path(self._config.write_queue.journal_path)
            self._admin = AdminServer(self._config.admin, app, socket)
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
        if self.components.write.access is not None:
            await self.components.write.access.stop()  # no more requests: write the last accesses
        await self.components.stop_write_upkeep()
        drained = await self.components.write.queue.drain()
        if self.components.write.queue.writes:
            log.info("write queue %s", "drained" if drained else "not drained before the deadline")
        else:
            log.info("accepted turns are left to the writer process")
        if self._admin is not None:
            await self._admin.stop()
        await self.components.close()


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
