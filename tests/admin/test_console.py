"""The memory console on a running in-process sidecar (real admin listener,
milvus-lite, the write path's own supersession): sign-in and its cookie, the
login prompt without one, scoped tokens, list / search / filters, a memory with its
history, delete and forget behind the form token, export, injections explained,
escaping of stored text, and the pages' security headers."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from sidecar.admin.console.session import COOKIE
from sidecar.memory.read.pipeline import MemoryRequest
from sidecar.memory.records.records import Scope
from sidecar.runtime.server import Sidecar
from tests.admin.conftest import ADMIN, SCOPED
from tests.admin.test_api import add, base, call, new_user, say

FORM_TOKEN = re.compile(r'name="form_token" value="([^"]+)"')


@pytest.fixture
async def browser(sidecar: Sidecar) -> AsyncIterator[aiohttp.ClientSession]:
    """A client with its own cookie jar (IP hosts allowed), not signed in."""
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(
        f"http://127.0.0.1:{sidecar.admin_port}", cookie_jar=jar
    ) as session:
        yield session


async def sign_in(browser: aiohttp.ClientSession, token: str = ADMIN) -> None:
    async with browser.post(
        "/console/login", data={"token": token}, allow_redirects=False
    ) as response:
        assert response.status == 303, await response.text()
        assert response.headers["Location"] == "/console/"


async def get(browser: aiohttp.ClientSession, path: str, **params: str) -> tuple[int, str]:
    async with browser.get(path, params=params or None, allow_redirects=False) as response:
        return response.status, await response.text()


async def form_token(browser: aiohttp.ClientSession, path: str) -> str:
    status, page = await get(browser, path)
    assert status == 200, page
    found = FORM_TOKEN.search(page)
    assert found is not None
    return found.group(1)


async def post(
    browser: aiohttp.ClientSession, path: str, data: dict[str, str]
) -> tuple[int, str, str]:
    async with browser.post(path, data=data, allow_redirects=False) as response:
        return response.status, await response.text(), response.headers.get("Location", "")


# -- sign-in --------------------------------------------------------------------------


async def test_without_a_session_every_page_asks_to_sign_in(
    browser: aiohttp.ClientSession,
) -> None:
    for path in ("/console/", f"/console/users/{new_user()}", "/console/users/x/injections"):
        async with browser.get(path, allow_redirects=False) as response:
            assert response.status == 303
            assert response.headers["Location"] == "/console/login"
    status, page = await get(browser, "/console/login")
    assert status == 200
    assert '<label for="token">Admin token' in page
    assert 'type="password"' in page
    status, _, _ = await post(browser, f"/console/users/{new_user()}/forget", {"confirm": "x"})
    assert status == 401


async def test_a_wrong_token_is_refused_and_a_right_one_gets_a_safe_cookie(
    sidecar: Sidecar, browser: aiohttp.ClientSession
) -> None:
    status, page, _ = await post(browser, "/console/login", {"token": "not-a-token"})
    assert status == 401
    assert "not valid" in page
    assert len(browser.cookie_jar) == 0
    async with browser.post(
        "/console/login", data={"token": ADMIN}, allow_redirects=False
    ) as response:
        assert response.status == 303
        cookie = response.cookies[COOKIE]
    assert cookie["httponly"]
    assert cookie["samesite"] == "Strict"
    assert cookie["path"] == "/console"
    assert ADMIN not in cookie.value
    status, page = await get(browser, "/console/")
    assert status == 200
    assert "Signed in:" in page
    # The cookie's signature covers its content: a changed grant index is refused.
    browser.cookie_jar.clear()
    body, _, signature = cookie.value.partition(".")
    for forged in (f"{body[:-2]}AA.{signature}", f"{body}.{signature[:-2]}AA", body):
        headers = {"Cookie": f"{COOKIE}={forged}"}
        async with browser.get("/console/", headers=headers, allow_redirects=False) as response:
            assert response.status == 401, forged
            assert '<label for="token">Admin token' in await response.text()
    headers = {"Cookie": f"{COOKIE}={cookie.value}"}
    async with browser.get("/console/", headers=headers, allow_redirects=False) as response:
        assert response.status == 200


@pytest.mark.parametrize(
    "crafted",
    ["é", "x.é", "☃.☃", "\u00ff" * 50 + "." + "\u00ff" * 43, "%C3%A9.%FF", "a.b.c", "."],
)
async def test_a_crafted_cookie_is_not_signed_in_never_an_error(
    browser: aiohttp.ClientSession, crafted: str
) -> None:
    """Non-ASCII cookies used to reach ``hmac.compare_digest`` on ``str`` (a 500
    with a traceback); any malformed cookie is the sign-in page."""
    raw = f"{COOKIE}={crafted}".encode()
    for method, url in (("GET", "/console/"), ("POST", f"/console/users/{new_user()}/forget")):
        async with browser.request(
            method, url, headers={"Cookie": raw.decode("latin-1")}, allow_redirects=False
        ) as response:
            assert response.status == 401, (method, crafted)
            assert '<label for="token">Admin token' in await response.text()


@pytest.mark.parametrize("crafted", ["é", "☃" * 43, "\u00ff" * 43, ""])
async def test_a_crafted_form_token_is_refused_never_an_error(
    browser: aiohttp.ClientSession, crafted: str
) -> None:
    await sign_in(browser)
    user = new_user()
    status, page, _ = await post(
        browser, f"/console/users/{user}/forget", {"form_token": crafted, "confirm": user}
    )
    assert status == 403
    assert "The form expired" in page


async def test_pages_are_not_cached_and_run_no_script(browser: aiohttp.ClientSession) -> None:
    await sign_in(browser)
    async with browser.get("/console/") as response:
        assert response.headers["Cache-Control"] == "no-store"
        policy = response.headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy
        assert "script-src" not in policy
        assert "<script" not in await response.text()
    async with browser.get("/console/static/console.css") as response:
        assert response.status == 200
        assert response.content_type == "text/css"


async def test_sign_out_ends_the_session(browser: aiohttp.ClientSession) -> None:
    await sign_in(browser)
    token = await form_token(browser, "/console/")
    status, _, location = await post(browser, "/console/logout", {"form_token": token})
    assert (status, location) == (303, "/console/login")
    status, _ = await get(browser, "/console/")
    assert status == 303


# -- scopes ---------------------------------------------------------------------------


async def test_a_scoped_token_sees_only_its_users(
    http: aiohttp.ClientSession, browser: aiohttp.ClientSession
) -> None:
    alice, bob = new_user("alice"), new_user("bob")
    await add(http, alice, "Alice keeps bees.")
    await add(http, bob, "Bob's locker code is 4417.")
    await sign_in(browser, SCOPED)
    status, page = await get(browser, "/console/")
    assert "alice-*" in page
    status, page = await get(browser, f"/console/users/{alice}")
    assert status == 200
    assert "Alice keeps bees." in page
    for path in (
        f"/console/users/{bob}",
        f"/console/users/{bob}/export",
        f"/console/users/{bob}/injections",
        f"/console/users/{bob}/forget",
    ):
        status, page = await get(browser, path)
        assert status == 403, path
        assert "4417" not in page
    token = await form_token(browser, f"/console/users/{alice}")
    status, _, _ = await post(
        browser, f"/console/users/{bob}/forget", {"form_token": token, "confirm": bob}
    )
    assert status == 403
    status, listed = await call(http, "GET", f"{base(bob)}/memories")
    assert listed["total"] == 1


async def test_another_users_memory_is_not_found_through_the_console(
    http: aiohttp.ClientSession, browser: aiohttp.ClientSession
) -> None:
    alice, bob = new_user("alice"), new_user("bob")
    await add(http, alice, "Alice keeps bees.")
    bobs = await add(http, bob, "Bob's locker code is 4417.")
    await sign_in(browser)  # a token for every user: the path's user still decides
    status, page = await get(browser, f"/console/users/{alice}/memories/{bobs}")
    assert status == 404
    assert "4417" not in page
    token = await form_token(browser, f"/console/users/{alice}")
    status, page, _ = await post(
        browser, f"/console/users/{alice}/memories/{bobs}/delete", {"form_token": token}
    )
    assert status == 404
    status, _ = await call(http, "GET", f"{base(bob)}/memories/{bobs}")
    assert status == 200
    # Crafted ids are ids like any other (quoted in every filter) or refused.
    for crafted in ('x" || user_id != "y', "../admin", "a" * 300, "%00"):
        status, page = await get(browser, f"/console/users/{crafted}", status="all")
        assert status in (200, 400, 404), crafted
        assert "4417" not in page
        assert "bees" not in page


# -- reading --------------------------------------------------------------------------


async def test_list_search_and_filters(
    http: aiohttp.ClientSession, browser: aiohttp.ClientSession
) -> None:
    user = new_user()
    await add(http, user, "I am allergic to penicillin.", memory_type="semantic")
    await add(http, user, "Every Sunday I bake sourdough bread.", memory_type="procedural")
    await add(http, user, "<script>alert('x')</script> likes <b>bold</b> tea")
    await sign_in(browser)
    status, page = await get(browser, f"/console/users/{user}")
    assert status == 200
    assert "3 of 3" in page
    assert "penicillin" in page
    assert "sourdough" in page
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert" in page
    status, page = await get(browser, f"/console/users/{user}", q="what medicine must I avoid")
    assert status == 200
    assert page.index("penicillin") < page.index("sourdough") if "sourdough" in page else True
    assert "penicillin" in page
    status, page = await get(browser, f"/console/users/{user}", memory_type="procedural")
    assert "sourdough" in page
    assert "penicillin" not in page
    status, page = await get(browser, f"/console/users/{user}", status="superseded")
    assert "No memories match." in page
    status, page = await get(browser, f"/console/users/{user}", status="nonsense")
    assert status == 400


async def test_a_memory_shows_its_history(
    sidecar: Sidecar, browser: aiohttp.ClientSession, http: aiohttp.ClientSession
) -> None:
    user = new_user()
    await say(sidecar, user, "I live in Berlin.", 1_700_000_000_000)
    await say(sidecar, user, "I moved to Lisbon last month.", 1_700_000_100_000)
    _, listed = await call(http, "GET", f"{base(user)}/memories", params={"status": "all"})
    by_status = {m["status"]: m for m in listed["items"]}
    old, new = by_status["superseded"], by_status["active"]
    await sign_in(browser)
    status, page = await get(browser, f"/console/users/{user}/memories/{new['id']}")
    assert status == 200
    assert "Lisbon" in page
    history = page[page.index("<h2>History") :]
    assert "Berlin" in history
    assert "superseded by the next" in history
    assert f"/console/users/{user}/memories/{old['id']}" in history
    status, page = await get(browser, f"/console/users/{user}/memories/{'0' * 32}")
    assert status == 404


async def test_an_admin_add_that_changes_a_fact_shows_as_its_history(
    sidecar: Sidecar, browser: aiohttp.ClientSession, http: aiohttp.ClientSession
) -> None:
    # Whatever wrote it (chat, the API, the CLI), the console shows one current value
    # and what it replaced.
    user = new_user()
    await say(sidecar, user, "I moved to Lisbon last month.", 1_700_000_000_000)
    _, added = await call(
        http, "POST", f"{base(user)}/memories", json_body={"content": "User lives in Porto."}
    )
    assert added["decision"] == "supersede"
    await sign_in(browser)
    status, page = await get(browser, f"/console/users/{user}")
    assert status == 200
    assert "Porto" in page
    assert "Lisbon" not in page  # active memories only, by default
    status, page = await get(browser, f"/console/users/{user}/memories/{added['memory']['id']}")
    history = page[page.index("<h2>History") :]
    assert "Lisbon" in history
    assert f"/console/users/{user}/memories/{added['replaced']}" in history


# -- changing -------------------------------------------------------------------------


async def test_delete_needs_the_form_token(
    http: aiohttp.ClientSession, browser: aiohttp.ClientSession
) -> None:
    user = new_user()
    memory = await add(http, user, "My locker is number 12.")
    await sign_in(browser)
    target = f"/console/users/{user}/memories/{memory}/delete"
    status, _, _ = await post(browser, target, {"form_token": "forged"})
    assert status == 403
    status, _ = await call(http, "GET", f"{base(user)}/memories/{memory}")
    assert status == 200
    token = await form_token(browser, f"/console/users/{user}/memories/{memory}")
    status, _, location = await post(browser, target, {"form_token": token})
    assert status == 303
    status, page = await get(browser, location)
    assert "The memory was deleted." in page
    assert "locker" not in page
    _, listed = await call(http, "GET", f"{base(user)}/memories")
    assert listed["total"] == 0


async def test_forget_asks_for_the_user_id_first(
    http: aiohttp.ClientSession, browser: aiohttp.ClientSession
) -> None:
    user = new_user()
    await add(http, user, "My cat is called Miso.")
    await sign_in(browser)
    token = await form_token(browser, f"/console/users/{user}/forget")
    target = f"/console/users/{user}/forget"
    status, page, _ = await post(browser, target, {"form_token": token, "confirm": "someone"})
    assert status == 400
    assert "nothing was deleted" in page
    _, listed = await call(http, "GET", f"{base(user)}/memories")
    assert listed["total"] == 1
    status, page, _ = await post(browser, target, {"form_token": token, "confirm": user})
    assert status == 200
    assert "Forgotten" in page
    _, listed = await call(http, "GET", f"{base(user)}/memories", params={"status": "all"})
    assert listed["total"] == 0


async def test_export_downloads_json_lines(
    http: aiohttp.ClientSession, browser: aiohttp.ClientSession
) -> None:
    user = new_user()
    await add(http, user, "I drive a green Volvo.")
    await sign_in(browser)
    async with browser.get(f"/console/users/{user}/export") as response:
        assert response.status == 200
        assert response.headers["Content-Disposition"].startswith("attachment")
        text = await response.text()
    rows = [json.loads(line) for line in text.splitlines()]
    assert [r["content"] for r in rows if r["node_type"] == "memory"] == ["I drive a green Volvo."]


# -- why injected ---------------------------------------------------------------------


async def ask(sidecar: Sidecar, user: str, text: str) -> str:
    """A request through the request path, as the gRPC processor makes it."""
    request_id = uuid.uuid4().hex
    profile = sidecar.components.config.defaults
    await sidecar.components.read.pipeline.run(
        MemoryRequest(
            text=text, history=(), scope=Scope(user), profile=profile, request_id=request_id
        )
    )
    return request_id


async def test_an_injection_is_explained_then_forgotten(
    sidecar: Sidecar, http: aiohttp.ClientSession, browser: aiohttp.ClientSession
) -> None:
    user = new_user()
    memory = await add(http, user, "I am allergic to shellfish.")
    request_id = await ask(sidecar, user, "Which food allergies do I have?")
    status, body = await call(http, "GET", f"{base(user)}/injections")
    assert status == 200
    assert [i["request_id"] for i in body["items"]] == [request_id]
    status, explained = await call(http, "GET", f"{base(user)}/injections/{request_id}")
    assert status == 200
    first: dict[str, Any] = explained["memories"][0]
    assert first["id"] == memory
    assert first["memory"]["content"] == "I am allergic to shellfish."
    assert first["via"] == "direct"
    # The evidence, then the score after each stage of `default` that changed it.
    assert list(first["signals"])[:4] == ["cosine", "bm25", "lexical", "ngram"]
    assert first["signals"]["rerank"] == first["score"]
    assert explained["query"] == "Which food allergies do I have?"
    status, _ = await call(http, "GET", f"{base(new_user())}/injections/{request_id}")
    assert status == 404  # another user's request is not found

    await sign_in(browser)
    status, page = await get(browser, f"/console/users/{user}/injections")
    assert request_id in page
    status, page = await get(browser, f"/console/users/{user}/injections/{request_id}")
    assert status == 200
    assert "shellfish" in page
    assert "Which food allergies" in page

    status, _ = await call(http, "DELETE", base(user))
    assert status == 200
    status, body = await call(http, "GET", f"{base(user)}/injections")
    assert body["items"] == []


async def test_an_unknown_user_id_says_nothing_is_stored_for_it(
    sidecar: Sidecar, browser: aiohttp.ClientSession, http: aiohttp.ClientSession
) -> None:
    await sign_in(browser)
    status, page = await get(browser, f"/console/users/{new_user()}")
    assert status == 200
    assert "Nothing is stored for this user id" in page
    known = new_user()
    await add(http, known, "User keeps chickens.")
    status, page = await get(browser, f"/console/users/{known}", status="archived")
    assert status == 200
    assert "No memories match." in page  # the user exists; the filter matched nothing
    assert "Nothing is stored" not in page
