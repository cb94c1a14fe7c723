"""Sharing is a privilege (sidecar.admin.grants), on a running in-process sidecar:
a token scoped to some users may write only private memories, or group memories
for the groups its ``share_groups`` names, never public ones; it may not change a
memory already shared beyond its rights; a token for all users still shares; and
what a scoped token tried to share never reaches another user's block. The chat
path never changes a shared memory either, and consolidation never merges across
visibilities."""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import pytest

from sidecar.admin.grants import Grant, SharingRefused
from sidecar.memory.read.pipeline import MemoryRequest
from sidecar.memory.records.records import MemoryRecord, Scope, Status, Visibility
from sidecar.memory.write.upkeep.consolidation import plan_merges
from sidecar.runtime.server import Sidecar
from tests.admin.conftest import SCOPED, SHARER
from tests.admin.test_api import add, base, call, new_user, say

PAYMENT = "Payments for the team now go to IBAN DE89370400440532013000."


async def block_for(sidecar: Sidecar, user: str, question: str) -> str:
    """The memory block the request path would inject for ``user``."""
    pipeline, profile = sidecar.components.read.pipeline, sidecar.components.config.defaults
    found = await pipeline.run(
        MemoryRequest(text=question, history=(), scope=Scope(user, ("team-a", "team-b")),
                      profile=profile)
    )  # fmt: skip
    return found.block.text


async def listed(http: aiohttp.ClientSession, user: str) -> list[dict[str, Any]]:
    status, page = await call(http, "GET", f"{base(user)}/memories", params={"status": "all"})
    assert status == 200, page
    return list(page["items"])


@pytest.mark.parametrize(
    ("token", "fields"),
    [
        (SCOPED, {"visibility": "public"}),
        (SCOPED, {"visibility": "group", "group_id": "team-a"}),
        (SHARER, {"visibility": "public"}),
        (SHARER, {"visibility": "group", "group_id": "team-b"}),
    ],
)
async def test_a_scoped_token_may_not_share_beyond_its_groups(
    sidecar: Sidecar, http: aiohttp.ClientSession, token: str, fields: dict[str, str]
) -> None:
    user = new_user()
    status, body = await call(
        http, "POST", f"{base(user)}/memories", token=token,
        json_body={"content": PAYMENT, **fields},
    )  # fmt: skip
    assert status == 403
    assert body["error"] == "sharing_forbidden"
    assert ("public" in body["message"]) == (fields["visibility"] == "public")
    assert await listed(http, user) == []
    other = new_user("bob")
    assert "IBAN" not in await block_for(sidecar, other, "Where do payments go?")


async def test_a_scoped_token_writes_private_memories_and_shares_with_its_groups(
    http: aiohttp.ClientSession,
) -> None:
    user = new_user()
    for token, fields in (
        (SCOPED, {}),
        (SCOPED, {"visibility": "user"}),
        (SHARER, {"visibility": "group", "group_id": "team-a"}),
    ):
        status, body = await call(
            http, "POST", f"{base(user)}/memories", token=token,
            json_body={"content": f"User note {len(fields)} {token[:5]}.", **fields},
        )  # fmt: skip
        assert status == 201, body
        assert body["memory"]["visibility"] == fields.get("visibility", "user")


async def test_a_scoped_token_may_not_patch_a_memory_into_sharing(
    sidecar: Sidecar, http: aiohttp.ClientSession
) -> None:
    user, other = new_user(), new_user("bob")
    mid = await add(http, user, PAYMENT)
    memory = f"{base(user)}/memories/{mid}"
    for token, patch in (
        (SCOPED, {"visibility": "public"}),
        (SCOPED, {"visibility": "group", "group_id": "team-a"}),
        (SHARER, {"visibility": "group", "group_id": "team-b"}),
        (SHARER, {"visibility": "public"}),
    ):
        status, body = await call(http, "PATCH", memory, token=token, json_body=patch)
        assert status == 403, (token, patch)
        assert body["error"] == "sharing_forbidden"
    status, body = await call(http, "GET", memory)
    assert body["visibility"] == "user"
    assert "IBAN" not in await block_for(sidecar, other, "Where do payments go?")


async def test_a_scoped_token_may_not_change_a_memory_shared_beyond_its_rights(
    sidecar: Sidecar, http: aiohttp.ClientSession
) -> None:
    user, other = new_user(), new_user("bob")
    mid = await add(http, user, "The office wifi password is on the fridge.", visibility="public")
    memory = f"{base(user)}/memories/{mid}"
    for token, patch in (
        (SCOPED, {"content": PAYMENT}),
        (SCOPED, {"visibility": "user", "content": PAYMENT}),
        (SHARER, {"importance": 1.0}),
    ):
        status, body = await call(http, "PATCH", memory, token=token, json_body=patch)
        assert status == 403, (token, patch)
        assert body["error"] == "sharing_forbidden"
    assert "IBAN" not in await block_for(sidecar, other, "Where do payments go?")
    assert "wifi" in await block_for(sidecar, other, "What is the office wifi password?")
    # Removing it stays the owner's right.
    status, _ = await call(http, "DELETE", memory, token=SCOPED)
    assert status == 200


async def test_a_token_for_all_users_still_shares(
    sidecar: Sidecar, http: aiohttp.ClientSession
) -> None:
    user, other = new_user(), new_user("bob")
    await add(http, user, PAYMENT, visibility="public")
    mid = await add(http, user, "The team stand-up is at 9:30 every Monday.")
    status, body = await call(
        http, "PATCH", f"{base(user)}/memories/{mid}",
        json_body={"visibility": "group", "group_id": "team-b"},
    )  # fmt: skip
    assert status == 200, body
    block = await block_for(sidecar, other, "Where do payments for the team go?")
    assert "IBAN" in block


async def test_import_with_a_scoped_token_is_refused(http: aiohttp.ClientSession) -> None:
    user = new_user()
    line = f'{{"content": "{PAYMENT}", "visibility": "public"}}'
    status, body = await call(http, "POST", f"{base(user)}/import", token=SHARER, data=line)
    assert status == 403
    assert "all users" in body["message"]
    assert await listed(http, user) == []


async def test_chat_never_changes_a_shared_memory(
    sidecar: Sidecar, http: aiohttp.ClientSession
) -> None:
    """The owner restating a shared fact in chat keeps their own private memory; the
    shared one, which other users see, stays as it was shared."""
    user = new_user()
    mid = await add(http, user, "User lives in Berlin.", visibility="public")
    await say(sidecar, user, "I live in Berlin, in Kreuzberg.", int(time.time() * 1000))
    await say(sidecar, user, "Actually I moved to Hamburg.", int(time.time() * 1000) + 1)
    status, shared = await call(http, "GET", f"{base(user)}/memories/{mid}")
    assert status == 200
    assert shared["content"] == "User lives in Berlin."
    assert shared["status"] == "active"
    assert shared["visibility"] == "public"


def record(rid: str, visibility: Visibility, group_id: str = "") -> MemoryRecord:
    return MemoryRecord(
        id=rid, user_id="u", content="User lives in Berlin.", visibility=visibility,
        group_id=group_id, status=Status.ACTIVE, created_at=int(rid[1:]),
    )  # fmt: skip


def test_consolidation_merges_only_memories_shared_alike() -> None:
    plans = plan_merges(
        [
            record("m1", Visibility.USER),
            record("m2", Visibility.PUBLIC),
            record("m3", Visibility.GROUP, "team-a"),
            record("m4", Visibility.GROUP, "team-b"),
            record("m5", Visibility.USER),
        ]
    )
    assert [(kept.id, [m.id for m in merged]) for kept, merged in plans] == [("m1", ["m5"])]


@pytest.mark.parametrize(
    ("grant", "visibility", "group", "allowed"),
    [
        (Grant("all", "*"), Visibility.PUBLIC, "", True),
        (Grant("all", "*"), Visibility.GROUP, "any", True),
        (Grant("a", ("a-*",)), Visibility.USER, "", True),
        (Grant("a", ("a-*",)), Visibility.PUBLIC, "", False),
        (Grant("a", ("a-*",)), Visibility.GROUP, "g", False),
        (Grant("a", ("a-*",), ("g",)), Visibility.GROUP, "g", True),
        (Grant("a", ("a-*",), ("g",)), Visibility.GROUP, "h", False),
        (Grant("a", ("a-*",), ("g",)), Visibility.PUBLIC, "g", False),
    ],
)
def test_grant_rules(grant: Grant, visibility: Visibility, group: str, allowed: bool) -> None:
    assert (grant.refusal(visibility, group) is None) == allowed
    if not allowed:
        with pytest.raises(SharingRefused):
            grant.check(visibility, group)
