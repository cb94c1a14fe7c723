"""The memory admin HTTP API under ``/v1/admin/`` on the admin listener.

Authentication: ``Authorization: Bearer <token>``; a token is ``admin.token`` (every
user) or one of ``admin.tokens`` (the users matching its patterns). Tokens are
compared in constant time (their SHA-256 digests, so neither content nor length
leaks through timing). Without any token configured the API is disabled: every
memory route answers 403 and says how to enable it — it is never open.

Status codes: 400 invalid input (every problem with its path: ``query.limit``,
``body.content``, ``line 3.importance``), 401 no or an unknown token, 403 a user
outside the token's scope, a share beyond the token's rights (``sharing_forbidden``:
see :mod:`sidecar.admin.grants`), or the API disabled, 404 no such memory *for this
user* — a memory id of another user is a 404 too, so existence does not leak —,
503 the store or the model failed. ``/metrics``, ``/healthz``, ``/ready`` and the
OpenAPI document stay unauthenticated. ``GET /v1/admin/users`` names no user: it
lists the users that own memories among those the token may manage.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from sidecar.admin.explain import Explained, ExplainOff
from sidecar.admin.grants import Grant, SharingRefused
from sidecar.admin.models import (
    ExportQuery,
    ImportQuery,
    ListQuery,
    MemoryInput,
    MemoryPatch,
    SearchQuery,
    UsersQuery,
    ValidationFailed,
    memory_json,
    parse,
    row_id,
)
from sidecar.admin.openapi import OPENAPI_PATH, build_openapi
from sidecar.admin.service import ForgetReport, History, MemoryAdmin, NotFound
from sidecar.admin.transfer import ImportReport
from sidecar.admin.users import users_json
from sidecar.config import AdminConfig
from sidecar.errors import EmbeddingError, InvalidInput, SidecarError, StoreError
from sidecar.logs import clean_request_id, request_context
from sidecar.memory.read.injections import Injection
from sidecar.memory.store.filters import validate_identifier
from sidecar.memory.write.upkeep.consolidation import ConsolidationReport
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

PREFIX = "/v1/admin"
#: Largest request body (an import file) accepted, in bytes.
MAX_BODY_BYTES = 64 * 1024 * 1024
DISABLED_MESSAGE = (
    "the memory admin API is disabled: configure admin.token (or SIDECAR_ADMIN_TOKEN) "
    "or admin.tokens"
)

Handler = Callable[["Call"], Awaitable[web.StreamResponse]]


class TokenAuth:
    """Bearer tokens from :class:`AdminConfig`, compared in constant time."""

    def __init__(self, config: AdminConfig) -> None:
        grants: list[tuple[bytes, Grant]] = []
        if config.token is not None:
            grants.append((_digest(config.token.get_secret_value()), Grant("admin", "*")))
        for index, scoped in enumerate(config.tokens):
            name = scoped.name or f"tokens[{index}]"
            grant = Grant(name, scoped.users, scoped.share_groups)
            grants.append((_digest(scoped.token.get_secret_value()), grant))
        self._grants = tuple(grants)

    @property
    def enabled(self) -> bool:
        return bool(self._grants)

    @property
    def grants(self) -> tuple[Grant, ...]:
        """Every configured grant, in configuration order (``admin.token`` first)."""
        return tuple(grant for _, grant in self._grants)

    def fingerprint(self) -> bytes:
        """A digest of every configured token and its scope: what console sessions
        are signed with, so a changed token or scope invalidates them."""
        digest = hashlib.sha256()
        for secret, grant in self._grants:
            digest.update(secret)
            digest.update(repr((grant.name, grant.users, grant.share_groups)).encode())
        return digest.digest()

    def authenticate(self, header: str | None) -> Grant | None:
        """The grant of the bearer token in ``header`` (None: missing or unknown)."""
        scheme, _, presented = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return None
        digest = _digest(presented.strip())
        found: Grant | None = None
        for secret, grant in self._grants:  # every token is compared: constant time
            if hmac.compare_digest(secret, digest) and found is None:
                found = grant
        return found


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class Call:
    """One authorised request: the validated user and, where the route has one,
    memory id."""

    request: web.Request
    user: str
    grant: Grant
    memory: str = ""

    def query(self) -> dict[str, str]:
        return {key: self.request.query[key] for key in self.request.query}

    async def body(self) -> Any:
        try:
            return await self.request.json(loads=json.loads)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValidationFailed([("body", f"not valid JSON: {exc}")]) from None
        except RecursionError:
            raise ValidationFailed([("body", "not valid JSON: nested too deep")]) from None


WebHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def observed(metrics: Metrics, operation: str, handle: WebHandler) -> WebHandler:
    """``handle`` with a request id (``x-request-id`` in and out, on every log line of
    the call), counted by operation and status, and one log line (no content)."""

    async def endpoint(request: web.Request) -> web.StreamResponse:
        request_id = clean_request_id(request.headers.get("x-request-id"))
        started = time.perf_counter()
        with request_context(request_id):
            response = await handle(request)
            response.headers["x-request-id"] = request_id
            metrics.admin_requests.labels(operation=operation, status=str(response.status)).inc()
            log.info(
                "admin %s status=%d ms=%.1f",
                operation,
                response.status,
                (time.perf_counter() - started) * 1000,
            )
            return response

    return endpoint


async def stream_lines(request: web.Request, lines: AsyncIterator[str]) -> web.StreamResponse:
    """An export's JSON lines as a download; a store error on the first line is
    raised before any header goes out (so it can still become an error reply)."""
    first = await anext(lines, None)
    response = web.StreamResponse(
        headers={
            "Content-Type": "application/x-ndjson; charset=utf-8",
            "Content-Disposition": 'attachment; filename="memories.jsonl"',
            "Cache-Control": "no-store",
        }
    )
    await response.prepare(request)
    if first is not None:
        await response.write(first.encode("utf-8"))
        async for line in lines:
            await response.write(line.encode("utf-8"))
    await response.write_eof()
    return response


def error_response(status: int, code: str, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": code, "message": message, **extra}, status=status)


def history_json(history: History) -> dict[str, Any]:
    return {
        "memory": memory_json(history.memory),
        "supersedes": history.supersedes,
        "superseded_by": history.memory.superseded_by or None,
        "chain": [memory_json(r) for r in history.chain],
    }


def forget_json(report: ForgetReport) -> dict[str, Any]:
    return {
        "user": report.user,
        "deleted": {
            "memories": report.memories,
            "categories": report.categories,
            "rows": report.rows,
        },
        "journal": None
        if report.journal is None
        else {
            "unwritten_turns_dropped": report.journal.unwritten,
            "written_turns_cleared": report.journal.written,
            "in_progress_turns": report.journal.in_progress,
        },
    }


def consolidation_json(report: ConsolidationReport) -> dict[str, Any]:
    return {
        "user": report.user,
        "memories": report.memories,
        "groups": report.groups,
        "merged": report.merged,
    }


def import_json(report: ImportReport) -> dict[str, Any]:
    return {
        "user": report.user,
        "lines": report.lines,
        "memories": report.memories,
        "categories": report.categories,
        "embedded": report.embedded,
        "rows_written": report.rows_written,
        "seconds": report.seconds,
        "decisions": dict(report.decisions),
    }


class MemoryApi:
    """The ``/v1/admin/`` routes over one :class:`MemoryAdmin`."""

    def __init__(self, admin: MemoryAdmin | None, config: AdminConfig, metrics: Metrics) -> None:
        self._admin = admin
        self._auth = TokenAuth(config)
        self._metrics = metrics
        self.config = config

    @property
    def auth(self) -> TokenAuth:
        return self._auth

    @property
    def service(self) -> MemoryAdmin | None:
        """The admin service (None: no store to manage, every route answers 403)."""
        return self._admin

    @property
    def enabled(self) -> bool:
        return self._admin is not None and self._auth.enabled

    def register(self, app: web.Application) -> None:
        openapi = build_openapi()

        async def openapi_handler(request: web.Request) -> web.Response:
            return web.json_response(openapi)

        app.router.add_get(OPENAPI_PATH, openapi_handler)
        users = f"{PREFIX}/users/{{user}}"
        memory = f"{users}/memories/{{memory_id}}"
        routes: list[tuple[str, str, str, Handler, bool]] = [
            ("GET", f"{PREFIX}/users", "users", self._users, False),
            ("GET", f"{users}/memories", "list", self._list, False),
            ("POST", f"{users}/memories", "add", self._add, False),
            ("GET", memory, "get", self._get, False),
            ("PATCH", memory, "update", self._update, False),
            ("DELETE", memory, "delete", self._delete, False),
            ("GET", f"{memory}/history", "history", self._history, False),
            ("GET", f"{users}/search", "search", self._search, False),
            ("DELETE", users, "forget", self._forget, False),
            ("POST", f"{users}/consolidate", "consolidate", self._consolidate, False),
            ("GET", f"{users}/export", "export", self._export, False),
            ("POST", f"{users}/import", "import", self._import, True),
            ("GET", f"{users}/injections", "injections", self._injections, False),
            ("GET", f"{users}/injections/{{request_id}}", "explain", self._explain, False),
        ]
        for method, path, operation, handler, all_users in routes:
            app.router.add_route(method, path, self._endpoint(operation, handler, all_users))

    # -- the one wrapper: request id, auth, scope, validation, errors, metrics ----------

    def _endpoint(self, operation: str, handler: Handler, needs_all_users: bool) -> WebHandler:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._handle(request, operation, handler, needs_all_users)

        return observed(self._metrics, operation, handle)

    async def _handle(
        self, request: web.Request, operation: str, handler: Handler, needs_all_users: bool
    ) -> web.StreamResponse:
        if self._admin is None or not self._auth.enabled:
            return error_response(403, "admin_api_disabled", DISABLED_MESSAGE)
        grant = self._auth.authenticate(request.headers.get("Authorization"))
        if grant is None:
            response = error_response(401, "unauthorized", "a valid bearer token is required")
            response.headers["WWW-Authenticate"] = 'Bearer realm="memory-sidecar admin"'
            return response
        problems: list[tuple[str, str]] = []
        user = request.match_info.get("user", "")
        try:
            if "user" in request.match_info:  # GET /users names none: it lists the grant's
                validate_identifier(user, "user id")
        except InvalidInput as exc:
            problems.append(("path.user", str(exc)))
        memory = request.match_info.get("memory_id", "")
        if "memory_id" in request.match_info:
            try:
                row_id(memory, "memory id")
            except ValueError as exc:
                problems.append(("path.memory_id", str(exc)))
        if problems:
            return _invalid(ValidationFailed(problems))
        if user and not grant.allows(user):
            return error_response(403, "forbidden", "this token may not manage this user")
        if needs_all_users and not grant.all_users:
            return error_response(
                403,
                "forbidden",
                f"{operation} needs a token for all users (users: '*'): imported rows keep "
                "their ids, which are unique across all users",
            )
        try:
            return await handler(Call(request, user, grant, memory))
        except ValidationFailed as exc:
            return _invalid(exc)
        except NotFound:
            return error_response(404, "not_found", "no such memory for this user")
        except SharingRefused as exc:
            return error_response(403, "sharing_forbidden", str(exc))
        except ExplainOff as exc:
            return error_response(404, "explain_off", str(exc))
        except InvalidInput as exc:
            return error_response(400, "invalid_request", str(exc))
        except web.HTTPException:
            raise
        except (StoreError, EmbeddingError) as exc:
            log.warning("admin %s failed: %s", operation, type(exc).__name__)
            return error_response(
                503, "unavailable", f"the memory store or model failed ({type(exc).__name__})"
            )
        except SidecarError as exc:
            log.error("admin %s failed: %s", operation, type(exc).__name__)
            return error_response(500, "internal_error", type(exc).__name__)

    # -- handlers ----------------------------------------------------------------------

    @property
    def admin(self) -> MemoryAdmin:
        assert self._admin is not None  # _handle checked it
        return self._admin

    async def _users(self, call: Call) -> web.StreamResponse:
        query = parse(UsersQuery, call.query(), "query")
        return web.json_response(users_json(await self.admin.users(query, grant=call.grant)))

    async def _list(self, call: Call) -> web.StreamResponse:
        query = parse(ListQuery, call.query(), "query")
        page = await self.admin.list_memories(call.user, query)
        return web.json_response(
            {
                "user": call.user,
                "total": page.total,
                "offset": page.offset,
                "limit": page.limit,
                "next_offset": page.next_offset,
                "items": [memory_json(r) for r in page.items],
            }
        )

    async def _add(self, call: Call) -> web.StreamResponse:
        data = parse(MemoryInput, await call.body(), "body")
        added = await self.admin.add(call.user, data, grant=call.grant)
        return web.json_response(added.as_json(), status=201 if added.created else 200)

    async def _get(self, call: Call) -> web.StreamResponse:
        return web.json_response(memory_json(await self.admin.get(call.user, call.memory)))

    async def _update(self, call: Call) -> web.StreamResponse:
        patch = parse(MemoryPatch, await call.body(), "body")
        record = await self.admin.update(call.user, call.memory, patch, grant=call.grant)
        return web.json_response(memory_json(record))

    async def _delete(self, call: Call) -> web.StreamResponse:
        record = await self.admin.delete(call.user, call.memory)
        return web.json_response({"deleted": record.id})

    async def _history(self, call: Call) -> web.StreamResponse:
        return web.json_response(history_json(await self.admin.history(call.user, call.memory)))

    async def _search(self, call: Call) -> web.StreamResponse:
        query = parse(SearchQuery, call.query(), "query")
        hits = await self.admin.search(call.user, query)
        items = [
            {
                "score": round(hit.score, 6),
                "via": hit.via,
                "signals": {k: round(float(v), 6) for k, v in sorted(hit.signals.items())},
                "memory": memory_json(hit.record),
            }
            for hit in hits
        ]
        return web.json_response({"user": call.user, "items": items})

    async def _forget(self, call: Call) -> web.StreamResponse:
        return web.json_response(forget_json(await self.admin.forget(call.user)))

    async def _consolidate(self, call: Call) -> web.StreamResponse:
        return web.json_response(consolidation_json(await self.admin.consolidate(call.user)))

    async def _export(self, call: Call) -> web.StreamResponse:
        query = parse(ExportQuery, call.query(), "query")
        return await stream_lines(
            call.request, self.admin.export(call.user, embeddings=query.embeddings)
        )

    async def _injections(self, call: Call) -> web.StreamResponse:
        items = self.admin.explanations.recent(call.user)
        return web.json_response({"user": call.user, "items": [injection_json(i) for i in items]})

    async def _explain(self, call: Call) -> web.StreamResponse:
        request_id = call.request.match_info["request_id"]
        explained = await self.admin.explanations.explain(call.user, request_id)
        if explained is None:
            return error_response(404, "not_found", "no such injection kept for this user")
        return web.json_response(explained_json(explained))

    async def _import(self, call: Call) -> web.StreamResponse:
        query = parse(ImportQuery, call.query(), "query")
        body = await call.request.read()
        report = await self.admin.import_lines(
            call.user, body.splitlines(), reembed=query.reembed, grant=call.grant
        )
        return web.json_response(import_json(report))


def injection_json(injection: Injection) -> dict[str, Any]:
    return {
        "request_id": injection.request_id,
        "at": injection.at_ms,
        "profile": injection.profile,
        "query": injection.query,
        "rewritten": injection.rewritten,
        "deep_search": injection.deep,
        "memories": [
            {
                "id": m.id,
                "owner": m.owner,
                "visibility": m.visibility,
                "score": round(m.score, 6),
                "via": m.via,
                "signals": {k: round(v, 6) for k, v in m.signals.items()},
            }
            for m in injection.memories
        ],
    }


def explained_json(explained: Explained) -> dict[str, Any]:
    out = injection_json(explained.injection)
    for entry, item in zip(explained.memories, out["memories"], strict=True):
        item["memory"] = memory_json(entry.record) if entry.record is not None else None
    return out


def _invalid(exc: ValidationFailed) -> web.Response:
    return error_response(
        400,
        "invalid_request",
        "the request is invalid",
        errors=[{"path": path, "message": message} for path, message in exc.errors],
    )
