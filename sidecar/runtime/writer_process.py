"""A writer of its own (``write_queue.own_process``): the process that writes the
turns one sidecar worker accepts.

Without it a worker writes its turns itself: fact extraction through the LLM
client, the dedup judge, embedding the facts, storing, filing and linking them run
on the event loop and under the interpreter lock that also serve the next requests.
With it the worker only journals each turn (the response path's one SQLite
insert) and its writer, started beside it by the supervisor, claims the turns from
the same journal file and writes them with the usual components
(:meth:`sidecar.runtime.components.Components.build` with ``writer_process``). The category tree's
schedule and retention run here too. What the writer stores reaches every worker's
corpus cache over the cache relay (:mod:`sidecar.runtime.relay`); while that is
down, at the worker's next delta refresh.

A writer that dies is started again by the supervisor; the turns it was writing
are claimed again (the journal is at-least-once, the writer idempotent) and the
worker goes on accepting turns meanwhile. SIGTERM drains the journal up to
``write_queue.drain_timeout_s`` (the supervisor stops the workers first, so
nothing new arrives).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable

from sidecar.config import SidecarConfig
from sidecar.metrics import serve_registry
from sidecar.runtime.components import Components
from sidecar.runtime.lifecycle import freeze_startup_objects, watch_supervisor

log = logging.getLogger(__name__)


async def serve_writer(
    config: SidecarConfig,
    *,
    index: int,
    announce: Callable[[], None],
    supervisor_pid: int,
    metrics_port: int | None,
) -> None:
    """Write worker ``index``'s turns until SIGTERM, SIGINT or the supervisor is gone."""
    components = await Components.build(config, writer_process=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = loop.create_task(watch_supervisor(supervisor_pid, stop))
    try:
        await components.write.queue.start()  # requeues what a killed writer left in progress
        if components.relay_peers is not None:
            components.relay_peers.start()
        components.start_write_upkeep()
        components.start_stall_monitors()
        if metrics_port is not None:
            serve_registry(components.metrics.registry, metrics_port, config.admin.host, "writer")
        freeze_startup_objects()
        if components.gc_control is not None:
            components.gc_control.freeze_survivors()
        announce()
        log.info("writer %d writing turns pid=%d", index, os.getpid())
        await stop.wait()
    finally:
        watcher.cancel()
        await components.stop_write_upkeep()
        drained = await components.write.queue.drain()
        log.info("writer %d %s", index, "drained" if drained else "stopped with turns left")
        await components.close()
