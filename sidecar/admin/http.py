"""The HTTP admin listener: Prometheus metrics, liveness and readiness (always
unauthenticated), and the memory admin API (:mod:`sidecar.admin.api`) and its web
console (:mod:`sidecar.admin.console`) when given."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from sidecar.admin.api import MAX_BODY_BYTES, MemoryApi
from sidecar.admin.console.routes import Console
from sidecar.config import AdminConfig
from sidecar.metrics import Metrics

ReadinessCheck = Callable[[], Awaitable[dict[str, bool]]]


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
    def __init__(self, config: AdminConfig, app: web.Application) -> None:
        self._config = config
        self._runner = web.AppRunner(app, access_log=None)
        self._site: web.TCPSite | None = None
        self.port = 0

    async def start(self) -> None:
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self._config.host, self._config.port)
        await self._site.start()
        server = self._site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self._config.port

    async def stop(self) -> None:
        await self._runner.cleanup()
