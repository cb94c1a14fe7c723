"""The HTTP admin listener: Prometheus metrics, liveness and readiness (always
unauthenticated), and the memory admin API (:mod:`sidecar.admin.api`) and its web
console (:mod:`sidecar.admin.console`) when given."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket as socketlib
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from sidecar.admin.api import MAX_BODY_BYTES, MemoryApi
from sidecar.admin.console.routes import Console
from sidecar.config import AdminConfig
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], Awaitable[dict[str, bool]]]
#: A Unix socket path's limit (``sun_path``, with its terminating zero).
MAX_SOCKET_PATH = 108


def build_admin_app(
    metrics: Metrics, readiness: ReadinessCheck, api: MemoryApi | None = None
) -> web.Application:
    async def metrics_handler(request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), content_type="text/plain", charset="utf-8")

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def ready(request: web.Request) -> web.Response:
        """Every check by name (store, embedder), 503 unless all pass."""
        checks = await readiness()
        ok = all(checks.values())
        return web.json_response({"ready": ok, "checks": checks}, status=200 if ok else 503)

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/ready", ready)
    if api is not None:
        api.register(app)
        if api.config.console:
            Console(api.service, api.auth, api.config, metrics).register(app)
    return app


class AdminServer:
    """The admin app on ``admin.host:admin.port`` and, with ``socket``, on that Unix
    socket too (mode 0600; see :mod:`sidecar.admin.remote` for who uses it)."""

    def __init__(
        self, config: AdminConfig, app: web.Application, socket: Path | None = None
    ) -> None:
        self._config = config
        self._runner = web.AppRunner(app, access_log=None)
        self._site: web.TCPSite | None = None
        self._socket = socket
        self._unix: web.UnixSite | None = None
        self.port = 0

    @property
    def socket(self) -> Path | None:
        """The Unix socket served (None: none)."""
        return self._socket if self._unix is not None else None

    async def start(self) -> None:
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self._config.host, self._config.port)
        await self._site.start()
        server = self._site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self._config.port
        if self._socket is not None:
            await self._serve_socket(self._socket)

    async def _serve_socket(self, path: Path) -> None:
        """The admin app on ``path`` too; a socket that cannot be made (a read-only
        directory, a path too long) is a warning, never a failed start: the CLI then
        names ``--remote``."""
        try:
            if not await asyncio.to_thread(_claim_socket, path):
                return
            site = web.UnixSite(self._runner, str(path))
            await site.start()
            os.chmod(path, 0o600)
        except OSError as exc:
            log.warning("admin socket: not served (%s)", type(exc).__name__)
            return
        self._unix = site

    async def stop(self) -> None:
        await self._runner.cleanup()
        if self._unix is not None and self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.unlink()


def _claim_socket(path: Path) -> bool:
    """Whether ``path`` is free for this process's admin socket: its directory made
    (0700) if missing, a stale socket (nothing listening) removed. False, with a log
    line, when another process serves it, something else is there or the path is too
    long for a socket."""
    if len(os.fsencode(path)) >= MAX_SOCKET_PATH:
        log.warning("admin socket: the path is too long for a Unix socket; none served")
        return False
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return True
    if not stat.S_ISSOCK(mode):
        log.warning("admin socket: %s exists and is no socket; none served", path)
        return False
    probe = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink(missing_ok=True)  # stale: its sidecar is gone
        return True
    finally:
        probe.close()
    log.warning("admin socket: another process serves %s; none served here", path)
    return False
