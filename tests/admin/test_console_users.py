"""The console's start page finds a user without knowing the id: the users that own
memories, by id, with their counts, searched by any part of the id, paged, each id a
link to that user's memories; a scoped token lists its own users only; every page's
header links to it."""

from __future__ import annotations

import html
import re
import uuid

import aiohttp
import pytest

from tests.admin.conftest import SCOPED
from tests.admin.test_api import add
from tests.admin.test_console import browser, get, sign_in

__all__ = ["browser"]  # the fixture, shared with test_console

LINK = re.compile(r'<a href="/console/users/([^"?]+)"><code>')


def linked(page: str) -> list[str]:
    """The user ids the page's table links to, in order (as the URL has them)."""
    return LINK.findall(page)


async def test_the_start_page_lists_users_found_by_part_of_their_id(
    http: aiohttp.ClientSession, browser: aiohttp.ClientSession
) -> None:
    tag = uuid.uuid4().hex[:10]
    ann, bob = f"alice-{tag}-ann", f"bob-{tag}"
    await add(http, ann, "Ann keeps bees.")
    await add(http, ann, "Ann sails on weekends.")
    await add(http, bob, "Bob's locker code is 4417.")
    await sign_in(browser)
    status, page = await get(browser, "/console/", q=tag[2:8].upper())
    assert status == 200, page
    assert linked(page) == [ann, bob]
    row = page[page.index(f"/console/users/{ann}") :].split("</tr>")[0]
    assert re.findall(r'<td class="num">(\d+)</td>', row) == ["2", "2"]  # active, all
    assert "<time" in row  # the last change
    assert "2 users whose id contains" in page
    assert f'name="q" id="u-q" value="{tag[2:8].upper()}"' in page  # kept in the box
    assert "4417" not in page  # ids and counts only: no memory text
    # The exact id still opens a user; the header links back to the list.
    assert 'action="/console/open"' in page
    _, memories = await get(browser, f"/console/users/{ann}")
    assert '<nav aria-label="Console"><a href="/console/">Users</a></nav>' in memories
    status, none = await get(browser, "/console/", q=f"{tag}-nobody")
    assert status == 200
    assert "No user id contains" in none
    assert linked(none) == []


async def test_the_list_pages_on_by_id(
    http: aiohttp.ClientSession, browser: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = uuid.uuid4().hex[:10]
    names = [f"pages-{tag}-{n}" for n in "abc"]
    for name in names:
        await add(http, name, "User likes tea.")
    monkeypatch.setattr("sidecar.admin.console.routes.PAGE_SIZE", 2)
    await sign_in(browser)
    _, first = await get(browser, "/console/", q=tag)
    assert linked(first) == names[:2]
    following = re.search(r'<a href="([^"]+)">Next →</a>', first)
    assert following is not None
    assert "First page" not in first
    _, second = await get(browser, html.unescape(following.group(1)))
    assert linked(second) == names[2:]
    assert "Next →" not in second
    assert "First page" in second


async def test_a_scoped_token_lists_its_users_only(
    http: aiohttp.ClientSession, browser: aiohttp.ClientSession
) -> None:
    tag = uuid.uuid4().hex[:10]
    await add(http, f"alice-{tag}", "Alice keeps bees.")
    await add(http, f"bob-{tag}", "Bob's locker code is 4417.")
    await sign_in(browser, SCOPED)
    status, page = await get(browser, "/console/", q=tag)
    assert status == 200
    assert linked(page) == [f"alice-{tag}"]
    assert f"bob-{tag}" not in page
    assert "those this token may see" in page
    assert "alice-*" in page  # its patterns, as before


async def test_ids_are_escaped_and_a_bad_search_is_said_not_failed(
    http: aiohttp.ClientSession, browser: aiohttp.ClientSession
) -> None:
    tag = uuid.uuid4().hex[:10]
    await add(http, f"odd-{tag}-<b>x&y", "User has an odd id.")
    await sign_in(browser)
    status, page = await get(browser, "/console/", q=tag)
    assert status == 200
    assert f"odd-{tag}-&lt;b&gt;x&amp;y" in page
    assert "<b>" not in page
    assert linked(page) == [f"odd-{tag}-%3Cb%3Ex%26y"]
    status, page = await get(browser, "/console/", q="a\x00b")
    assert status == 400
    assert 'role="alert"' in page
    assert "query.q" in page
    status, page = await get(browser, "/console/", after=" x")
    assert status == 400
    assert "query.after" in page
