"""The memory console: server-rendered pages under ``/console/`` on the admin
listener, over the same :class:`~sidecar.admin.service.MemoryAdmin` as the API, with
the same tokens and scopes (a scoped token sees its users only).

Sign-in posts a token once and gets a signed cookie (:mod:`.session`); pages that
change something take a POST with the session's form token. Pages are sent with
``Cache-Control: no-store`` and a content security policy that allows nothing but
this console's own stylesheet and forms: no script runs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources

from aiohttp import web

from sidecar.admin.api import DISABLED_MESSAGE, TokenAuth, WebHandler, observed, stream_lines
from sidecar.admin.console import injection_views, user_views, views
from sidecar.admin.console.html import Markup, page, path
from sidecar.admin.console.session import COOKIE, COOKIE_PATH, ConsoleSessions, Session
from sidecar.admin.explain import ExplainOff
from sidecar.admin.models import (
    ListQuery,
    SearchQuery,
    UsersQuery,
    ValidationFailed,
    parse,
    row_id,
)
from sidecar.admin.service import MemoryAdmin, NotFound
from sidecar.config import AdminConfig
from sidecar.errors import EmbeddingError, InvalidInput, SidecarError, StoreError
from sidecar.memory.records.records import MemoryRecord
from sidecar.memory.store.filters import validate_identifier
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

#: Memories per page of the list.
PAGE_SIZE = 50
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


@dataclass(frozen=True, slots=True)
class Visit:
    """One signed-in request, for a user the session may see (where it names one)."""

    request: web.Request
    session: Session
    form_token: str
    user: str = ""

    def page(self, title: str, body: Markup, status: int = 200) -> web.Response:
        return _html(
            page(title, body, signed_in=self.session.grant.name, form_token=self.form_token),
            status,
        )


PageHandler = Callable[[Visit], Awaitable[web.StreamResponse]]


def _html(document: str, status: int = 200) -> web.Response:
    return web.Response(
        text=document,
        status=status,
        content_type="text/html",
        charset="utf-8",
        headers=SECURITY_HEADERS,
    )


def _disabled() -> web.Response:
    """No token configured: the console, like the API, is off and says how to enable it."""
    return _html(page("Disabled", views.problem(403, DISABLED_MESSAGE)), 403)


def _redirect(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location, **SECURITY_HEADERS})


class Console:
    """Registers the console's routes on the admin application."""

    def __init__(
        self, admin: MemoryAdmin | None, auth: TokenAuth, config: AdminConfig, metrics: Metrics
    ) -> None:
        self._admin = admin
        self._auth = auth
        self._sessions = ConsoleSessions(auth, config.console_session_s)
        self._metrics = metrics
        self._css = resources.files(__package__).joinpath("console.css").read_text("utf-8")

    def register(self, app: web.Application) -> None:
        user = "/console/users/{user}"
        memory = f"{user}/memories/{{memory_id}}"
        app.router.add_get("/console", self._root)
        app.router.add_get("/console/static/console.css", self._stylesheet)
        app.router.add_get("/console/login", self._login_form)
        app.router.add_post("/console/login", observed(self._metrics, "console_login", self._login))
        pages: list[tuple[str, str, str, PageHandler, bool]] = [
            ("GET", "/console/", "console_home", self._home, False),
            ("POST", "/console/logout", "console_logout", self._logout, True),
            ("GET", "/console/open", "console_open", self._open, False),
            ("GET", user, "console_memories", self._memories, False),
            ("GET", memory, "console_memory", self._memory, False),
            ("POST", f"{memory}/delete", "console_delete", self._delete, True),
            ("GET", f"{user}/forget", "console_forget", self._forget_form, False),
            ("POST", f"{user}/forget", "console_forget", self._forget, True),
            ("GET", f"{user}/export", "console_export", self._export, False),
            ("GET", f"{user}/injections", "console_injections", self._injections, False),
            (
                "GET",
                f"{user}/injections/{{request_id}}",
                "console_injection",
                self._injection,
                False,
            ),
        ]
        for method, route, operation, handler, changes in pages:
            app.router.add_route(method, route, self._signed_in(operation, handler, changes))

    @property
    def admin(self) -> MemoryAdmin:
        assert self._admin is not None  # _signed_in checked it
        return self._admin

    # -- unauthenticated ----------------------------------------------------------------

    async def _root(self, request: web.Request) -> web.StreamResponse:
        return _redirect(path())

    async def _stylesheet(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            text=self._css,
            content_type="text/css",
            charset="utf-8",
            headers={"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"},
        )

    async def _login_form(self, request: web.Request) -> web.StreamResponse:
        if not self._enabled:
            return _disabled()
        return _html(page("Sign in", views.login()))

    async def _login(self, request: web.Request) -> web.StreamResponse:
        if not self._enabled:
            return _disabled()
        form = await request.post()
        token = form.get("token")
        session = self._sessions.sign_in(token.strip()) if isinstance(token, str) else None
        if session is None:
            return _html(page("Sign in", views.login("That token is not valid here.")), 401)
        response = _redirect(path())
        response.set_cookie(
            COOKIE,
            session.cookie,
            max_age=self._sessions.lifetime_s,
            path=COOKIE_PATH,
            httponly=True,
            samesite="Strict",
            secure=request.secure or request.headers.get("X-Forwarded-Proto") == "https",
        )
        return response

    @property
    def _enabled(self) -> bool:
        return self._admin is not None and self._auth.enabled

    # -- the one wrapper: session, scope, form token, errors, metrics --------------------

    def _signed_in(self, operation: str, handler: PageHandler, changes: bool) -> WebHandler:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._visit(request, handler, changes)

        return observed(self._metrics, operation, handle)

    async def _visit(
        self, request: web.Request, handler: PageHandler, changes: bool
    ) -> web.StreamResponse:
        if not self._enabled:
            return _disabled()
        cookie = request.cookies.get(COOKIE)
        session = self._sessions.read(cookie)
        if session is None:
            if request.method == "GET" and not cookie:
                return _redirect(path("login"))
            # A forged, expired or malformed cookie is simply not signed in.
            response = _html(page("Sign in", views.login("Please sign in again.")), 401)
            if cookie:
                response.del_cookie(COOKIE, path=COOKIE_PATH)
            return response
        visit = Visit(request, session, self._sessions.form_token(session))
        if changes:
            form = await request.post()
            token = form.get("form_token")
            if not self._sessions.form_ok(session, token if isinstance(token, str) else None):
                return visit.page(
                    "Not allowed", views.problem(403, "The form expired; try again."), 403
                )
        if "user" in request.match_info:
            user = request.match_info["user"]
            try:
                validate_identifier(user, "user id")
                if "memory_id" in request.match_info:
                    row_id(request.match_info["memory_id"], "memory id")
            except (InvalidInput, ValueError) as exc:
                return visit.page("Invalid", views.problem(400, str(exc)), 400)
            if not session.grant.allows(user):
                message = "This token may not see this user."
                return visit.page("Not allowed", views.problem(403, message), 403)
            visit = Visit(request, session, visit.form_token, user)
        try:
            return await handler(visit)
        except NotFound:
            return visit.page("Not found", views.problem(404, "No such memory for this user."), 404)
        except ValidationFailed as exc:
            message = "; ".join(f"{where}: {what}" for where, what in exc.errors)
            return visit.page("Invalid", views.problem(400, message), 400)
        except InvalidInput as exc:
            return visit.page("Invalid", views.problem(400, str(exc)), 400)
        except (StoreError, EmbeddingError) as exc:
            log.warning("console failed: %s", type(exc).__name__)
            message = f"The memory store or model failed ({type(exc).__name__})."
            return visit.page("Unavailable", views.problem(503, message), 503)
        except SidecarError as exc:
            log.error("console failed: %s", type(exc).__name__)
            return visit.page("Error", views.problem(500, type(exc).__name__), 500)

    # -- pages --------------------------------------------------------------------------

    async def _home(self, visit: Visit) -> web.StreamResponse:
        """The users that own memories (those the session may see), by id; ``q``
        keeps the ids that contain it, ``after`` pages on."""
        grant = visit.session.grant
        q = visit.request.query.get("q", "").strip()
        asked = {"q": q, "after": visit.request.query.get("after"), "limit": str(PAGE_SIZE)}
        try:
            query = parse(UsersQuery, {k: v for k, v in asked.items() if v}, "query")
        except ValidationFailed as exc:
            message = "; ".join(f"{where}: {what}" for where, what in exc.errors)
            return visit.page("Users", user_views.home(None, grant.users, q, message), 400)
        listing = await self.admin.users(query, grant=grant)
        return visit.page("Users", user_views.home(listing, grant.users, query.q))

    async def _logout(self, visit: Visit) -> web.StreamResponse:
        response = _redirect(path("login"))
        response.del_cookie(COOKIE, path=COOKIE_PATH)
        return response

    async def _open(self, visit: Visit) -> web.StreamResponse:
        user = visit.request.query.get("user", "").strip()
        try:
            validate_identifier(user, "user id")
        except InvalidInput as exc:
            body = user_views.home(None, visit.session.grant.users, error=str(exc))
            return visit.page("Users", body, 400)
        return _redirect(path("users", user))

    async def _memories(self, visit: Visit) -> web.StreamResponse:
        query = visit.request.query
        filters = views.Filters(
            q=query.get("q", "").strip(),
            status=query.get("status", "active"),
            memory_type=query.get("memory_type", ""),
            category_id=query.get("category_id", ""),
            visibility=query.get("visibility", ""),
            offset=_int(query.get("offset", "0")),
        )
        listing = parse(
            ListQuery,
            {
                key: value
                for key, value in {
                    "limit": str(PAGE_SIZE),
                    "offset": str(filters.offset),
                    "status": filters.status,
                    "memory_type": filters.memory_type,
                    "category_id": filters.category_id,
                    "visibility": filters.visibility,
                }.items()
                if value
            },
            "query",
        )
        categories = await self.admin.categories(visit.user)
        notice = _notice(query.get("done", ""))
        if filters.q:
            search = parse(SearchQuery, {"q": filters.q, "top_k": str(PAGE_SIZE)}, "query")
            hits = [
                hit
                for hit in await self.admin.search(visit.user, search)
                if _matches(hit.record, listing)
            ]
            body = views.memories(visit.user, filters, categories, None, hits, notice)
        else:
            found = await self.admin.list_memories(visit.user, listing)
            known = bool(found.total or categories) or await self.admin.has_rows(visit.user)
            body = views.memories(
                visit.user, filters, categories, found, None, notice, known_user=known
            )
        return visit.page(f"Memories of {visit.user}", body)

    async def _memory(self, visit: Visit) -> web.StreamResponse:
        memory = visit.request.match_info["memory_id"]
        history = await self.admin.history(visit.user, memory)
        categories = await self.admin.categories(visit.user)
        linked = await self.admin.linked(visit.user, history.memory)
        body = views.memory(visit.user, history, categories, linked, visit.form_token)
        return visit.page("Memory", body)

    async def _delete(self, visit: Visit) -> web.StreamResponse:
        await self.admin.delete(visit.user, visit.request.match_info["memory_id"])
        return _redirect(path("users", visit.user, query={"done": "deleted"}))

    async def _forget_form(self, visit: Visit) -> web.StreamResponse:
        return visit.page("Forget", views.forget_confirm(visit.user, visit.form_token))

    async def _forget(self, visit: Visit) -> web.StreamResponse:
        form = await visit.request.post()
        if form.get("confirm") != visit.user:
            body = views.forget_confirm(
                visit.user, visit.form_token, "The id typed does not match; nothing was deleted."
            )
            return visit.page("Forget", body, 400)
        report = await self.admin.forget(visit.user)
        return visit.page("Forgotten", views.forget_done(report))

    async def _export(self, visit: Visit) -> web.StreamResponse:
        return await stream_lines(visit.request, self.admin.export(visit.user))

    async def _injections(self, visit: Visit) -> web.StreamResponse:
        try:
            items = self.admin.explanations.recent(visit.user)
        except ExplainOff:
            return visit.page("Injections", injection_views.injections(visit.user, None))
        return visit.page("Injections", injection_views.injections(visit.user, items))

    async def _injection(self, visit: Visit) -> web.StreamResponse:
        request_id = visit.request.match_info["request_id"]
        try:
            explained = await self.admin.explanations.explain(visit.user, request_id)
        except ExplainOff:
            return visit.page("Injections", injection_views.injections(visit.user, None))
        if explained is None:
            message = "This process keeps no injection of that request for this user."
            return visit.page("Not found", views.problem(404, message), 404)
        return visit.page("Injection", injection_views.injection(visit.user, explained))


def _int(value: str) -> int:
    try:
        return max(0, int(value))
    except ValueError:
        return 0


def _matches(record: MemoryRecord, listing: ListQuery) -> bool:
    """Whether a search hit passes the list's filters (status, type, category,
    visibility)."""
    if listing.status != "all" and str(record.status) != listing.status:
        return False
    if listing.memory_type is not None and record.memory_type != listing.memory_type:
        return False
    if listing.category_id and record.category_id != listing.category_id:
        return False
    return listing.visibility is None or record.visibility == listing.visibility


def _notice(done: str) -> str | None:
    return {"deleted": "The memory was deleted."}.get(done)
