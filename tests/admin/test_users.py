"""Finding a user without knowing the id: the user ids that own memories, by id, with
their counts and last change, a page at a time, searched by any part of the id — the
tally's bounds (no store), then the admin service, the HTTP API and the CLI on the
package's running sidecar (milvus-lite)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from sidecar.admin.models import UsersQuery
from sidecar.admin.users import UserSummary, UserTally
from sidecar.cli import main
from sidecar.logs import JsonFormatter
from sidecar.runtime.server import Sidecar
from tests.admin.conftest import ADMIN, SCOPED
from tests.admin.test_api import add, base, call

# -- the tally: pages by id, bounded by the page size ----------------------------------


def rows_of(counts: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """``user -> (active, inactive)`` as shuffled memory rows, updated_at 1, 2, ..."""
    rows = []
    for user, (active, inactive) in counts.items():
        rows += [{"user_id": user, "status": "active"} for _ in range(active)]
        rows += [{"user_id": user, "status": "superseded"} for _ in range(inactive)]
    random.Random(7).shuffle(rows)
    return [{**row, "updated_at": at} for at, row in enumerate(rows, 1)]


def expected(rows: list[dict[str, Any]]) -> list[UserSummary]:
    found: dict[str, list[int]] = {}
    for row in rows:
        entry = found.setdefault(row["user_id"], [0, 0, 0])
        entry[0] += row["status"] == "active"
        entry[1] += 1
        entry[2] = max(entry[2], row["updated_at"])
    return [UserSummary(user, *found[user]) for user in sorted(found)]


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 50])
def test_pages_by_id_cover_every_user_once_and_hold_at_most_twice_the_page(limit: int) -> None:
    rng = random.Random(limit)
    counts = {
        f"u-{rng.randrange(10**6):06d}-{i}": (rng.randrange(4), rng.randrange(3)) for i in range(40)
    }
    counts = {user: c for user, c in counts.items() if sum(c)}
    rows = rows_of(counts)
    pages, after = [], ""
    while True:
        tally = UserTally(after=after, limit=limit, wanted=lambda _: True)
        for start in range(0, len(rows), 5):  # the store's pages
            tally.add(rows[start : start + 5])
            assert tally.held <= 2 * limit
        page = tally.page()
        assert len(page.items) <= limit
        assert tally.rows == len(rows)
        pages.append(page)
        if page.next_after is None:
            break
        assert page.next_after == page.items[-1].user
        after = page.next_after
    assert [u for page in pages for u in page.items] == expected(rows)
    assert pages[0].after is None
    assert all(page.items for page in pages)  # no empty last page


def test_the_search_and_the_scope_decide_who_is_counted() -> None:
    rows = rows_of({"alice-1": (2, 1), "Alicia-2": (1, 0), "bob-3": (3, 0), "malice-4": (0, 2)})
    tally = UserTally(after="", limit=10, wanted=lambda user: "alic" in user.casefold())
    tally.add(rows)
    page = tally.page("alic")
    assert [(u.user, u.active, u.memories) for u in page.items] == [
        ("Alicia-2", 1, 1),
        ("alice-1", 2, 3),
        ("malice-4", 0, 2),
    ]
    assert page.next_after is None
    assert page.q == "alic"
    with pytest.raises(ValueError, match="limit"):
        UserTally(after="", limit=0, wanted=lambda _: True)


@pytest.mark.parametrize(
    ("given", "path"),
    [
        ({"q": "a\x00b"}, "query.q"),
        ({"q": "x" * 257}, "query.q"),
        ({"after": " alice"}, "query.after"),
        ({"limit": "0"}, "query.limit"),
        ({"limit": "1001"}, "query.limit"),
        ({"user": "alice"}, "query.user"),
    ],
)
def test_the_query_is_validated(given: dict[str, str], path: str) -> None:
    from sidecar.admin.models import ValidationFailed, parse

    with pytest.raises(ValidationFailed) as failed:
        parse(UsersQuery, given, "query")
    assert [where for where, _ in failed.value.errors] == [path]
    assert parse(UsersQuery, {"q": "  ali  "}, "query").q == "ali"


# -- the service and the HTTP API ------------------------------------------------------


async def users(http: aiohttp.ClientSession, token: str = ADMIN, **params: str) -> tuple[int, Any]:
    return await call(http, "GET", "/v1/admin/users", token=token, params=params or None)


async def test_the_api_lists_users_with_counts_by_part_of_their_id(
    sidecar: Sidecar, http: aiohttp.ClientSession
) -> None:
    tag = uuid.uuid4().hex[:10]
    ann, ben, cat = f"alice-{tag}-ann", f"bob-{tag}-ben", f"alice-{tag}-cat"
    await add(http, ann, "Ann keeps bees.")
    await add(http, ann, "Ann sails on weekends.")
    await add(http, ben, "Ben rides a tandem.")
    archived = json.dumps({"content": "Ben once lived in Oslo.", "status": "archived"})
    status, _ = await call(http, "POST", f"{base(ben)}/import", data=archived)
    assert status == 200
    await add(http, cat, "Cat plays chess.")
    status, page = await users(http, q=tag.upper())  # any case
    assert status == 200, page
    assert [(u["user"], u["active"], u["memories"]) for u in page["items"]] == [
        (ann, 2, 2),  # by id: alice-<tag>-ann, alice-<tag>-cat, bob-<tag>-ben
        (cat, 1, 1),
        (ben, 1, 2),  # an archived memory counts in all, not in active
    ]
    assert page["next_after"] is None
    assert page["q"] == tag.upper()
    _, listed = await call(http, "GET", f"{base(ann)}/memories")
    newest = max(m["updated_at"] for m in listed["items"])
    assert page["items"][0]["updated_at"] == newest
    # The service answers the same as the API.
    served = await sidecar.components.memory_admin().users(UsersQuery(q=tag))
    assert [(u.user, u.active, u.memories) for u in served.items] == [
        (u["user"], u["active"], u["memories"]) for u in page["items"]
    ]
    # A page at a time.
    status, first = await users(http, q=tag, limit="2")
    assert [u["user"] for u in first["items"]] == [ann, cat]
    assert first["next_after"] == cat
    status, second = await users(http, q=tag, limit="2", after=cat)
    assert [u["user"] for u in second["items"]] == [ben]
    assert second["after"] == cat
    assert second["next_after"] is None
    # A scoped token lists only its users (alice-*).
    status, scoped = await users(http, SCOPED, q=tag)
    assert status == 200
    assert [u["user"] for u in scoped["items"]] == [ann, cat]
    # No match, and a forgotten user is gone from the list.
    status, none = await users(http, q=f"{tag}-nobody")
    assert none["items"] == []
    status, _ = await call(http, "DELETE", base(cat))
    assert status == 200
    _, after_forget = await users(http, q=tag)
    assert cat not in [u["user"] for u in after_forget["items"]]


async def test_the_list_is_the_same_whatever_the_store_page(
    http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = uuid.uuid4().hex[:10]
    for name in ("a", "b", "c"):
        await add(http, f"pager-{tag}-{name}", f"User {name} likes tea.")
    _, whole = await users(http, q=tag)
    # Every memory row of the store is swept, now 3 rows a store page.
    monkeypatch.setattr("sidecar.memory.store.milvus.QUERY_WINDOW", 12)
    _, paged = await users(http, q=tag)
    assert paged == whole
    assert [u["user"] for u in paged["items"]] == [f"pager-{tag}-{n}" for n in "abc"]


async def test_bad_queries_and_tokens_are_refused(http: aiohttp.ClientSession) -> None:
    for params, path in (
        ({"q": "a\x00"}, "query.q"),
        ({"limit": "0"}, "query.limit"),
        ({"after": "x" * 300}, "query.after"),
        ({"sort": "id"}, "query.sort"),
    ):
        status, body = await users(http, **params)
        assert status == 400, params
        assert [e["path"] for e in body["errors"]] == [path]
    status, body = await users(http, "wrong-token-0123456789")
    assert status == 401


async def test_the_list_logs_no_user_id_nor_search(
    http: aiohttp.ClientSession, captured_logs: list[logging.LogRecord]
) -> None:
    user = f"logged-{uuid.uuid4().hex[:10]}"
    await add(http, user, "User's locker code is 5531.")
    captured_logs.clear()
    status, page = await users(http, q=user)
    assert status == 200
    assert [u["user"] for u in page["items"]] == [user]
    text = "\n".join(JsonFormatter().format(record) for record in captured_logs)
    assert "admin users status=200" in text
    assert user not in text


# -- the CLI ----------------------------------------------------------------------------


@pytest.mark.usefixtures("restore_logging")
async def test_the_cli_lists_users_through_the_running_sidecar(
    sidecar: Sidecar,
    http: aiohttp.ClientSession,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    tag = uuid.uuid4().hex[:10]
    await add(http, f"cli-{tag}-one", "User one plays go.")
    await add(http, f"cli-{tag}-two", "User two plays bridge.")
    config = sidecar.components.config
    document = {
        "store": {"uri": config.store.uri},
        "write_queue": {"journal_path": str(tmp_path / "journal.sqlite3")},
        "admin": {"token": ADMIN, "socket": ""},
    }
    file = tmp_path / "remote.yaml"
    file.write_text(yaml.safe_dump(document), encoding="utf-8")
    url = f"http://127.0.0.1:{sidecar.admin_port}"
    args = ["memories", "users", "--config", str(file), "--remote", url, "-q", tag]
    code = await asyncio.to_thread(main, [*args, "--limit", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    page = json.loads(out)
    assert [u["user"] for u in page["items"]] == [f"cli-{tag}-one"]
    assert page["next_after"] == f"cli-{tag}-one"
    code = await asyncio.to_thread(main, [*args, "--after", page["next_after"]])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert [u["user"] for u in json.loads(out)["items"]] == [f"cli-{tag}-two"]
    code = await asyncio.to_thread(main, [*args, "--limit", "0"])
    out, err = capsys.readouterr()
    assert code == 2  # invalid input, refused before any call
    assert "option.limit" in err


@pytest.mark.usefixtures("restore_logging")
async def test_the_cli_lists_users_on_the_store_itself(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, embedding_cache_dir: Path
) -> None:
    file = tmp_path / "sidecar.yaml"
    document = {
        "store": {"uri": str(tmp_path / "memory.db")},
        "write_queue": {"journal_path": str(tmp_path / "journal.sqlite3")},
        "embedding": {"cache_dir": str(embedding_cache_dir)},
        "hierarchy": {"schedule_s": 0},
    }
    file.write_text(yaml.safe_dump(document), encoding="utf-8")
    config = ["--config", str(file)]
    for user, text in (("carol", "Carol grows tomatoes."), ("Carl", "Carl rows.")):
        adding = ["memories", "add", *config, "--user", user, "--content", text]
        assert await asyncio.to_thread(main, adding) == 0
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["memories", "users", *config, "--query", "CAR"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "directly on the configured store" in err
    page = json.loads(out)
    assert [(u["user"], u["active"], u["memories"]) for u in page["items"]] == [
        ("Carl", 1, 1),
        ("carol", 1, 1),
    ]
