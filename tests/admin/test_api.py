"""The memory admin HTTP API on a running in-process sidecar (real gRPC and admin
listeners, milvus-lite): bearer-token auth and scopes, per-user isolation (another
user's memory is a 404), CRUD, the supersession history built by the write path,
forget, export/import round trip, validation errors with paths, and the metrics
and log lines the calls leave (request ids, no memory text)."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from sidecar.admin.api import MemoryApi
from sidecar.admin.http import build_admin_app
from sidecar.admin.service import owner_id
from sidecar.config import AdminConfig
from sidecar.logs import JsonFormatter
from sidecar.memory.read.pipeline import MemoryRequest
from sidecar.memory.records.categories import topic_id
from sidecar.memory.records.records import Scope
from sidecar.memory.records.turns import Turn
from sidecar.metrics import Metrics
from sidecar.runtime.server import Sidecar
from tests.admin.conftest import ADMIN, SCOPED

Reply = tuple[int, Any]


async def call(
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    *,
    token: str | None = ADMIN,
    json_body: Any = None,
    data: str | bytes | None = None,
    params: dict[str, str] | None = None,
) -> Reply:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with http.request(
        method, path, headers=headers, json=json_body, data=data, params=params
    ) as response:
        text = await response.text()
        if response.content_type == "application/json":
            return response.status, json.loads(text)
        return response.status, text


def new_user(prefix: str = "alice") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def base(user: str) -> str:
    return f"/v1/admin/users/{user}"


async def add(http: aiohttp.ClientSession, user: str, content: str, **fields: Any) -> str:
    status, body = await call(
        http, "POST", f"{base(user)}/memories", json_body={"content": content, **fields}
    )
    assert status == 201, body
    return str(body["memory"]["id"])


async def say(sidecar: Sidecar, user: str, text: str, at: int) -> None:
    turn = Turn(user_id=user, user_text=text, assistant_text="Noted.", created_at=at)
    await sidecar.components.write.writer.write_turn(turn)


# -- no token configured: the memory API is off, never open ----------------------------


async def test_without_a_token_the_memory_api_is_disabled() -> None:
    async def ready() -> dict[str, bool]:
        return {"store": True, "embedder": True}

    metrics = Metrics()
    app = build_admin_app(metrics, ready, MemoryApi(None, AdminConfig(), metrics))
    async with TestClient(TestServer(app)) as client:
        for method, path in (
            ("GET", "/v1/admin/users/alice/memories"),
            ("DELETE", "/v1/admin/users/alice"),
            ("POST", "/v1/admin/users/alice/import"),
        ):
            response = await client.request(
                method, path, headers={"Authorization": "Bearer anything-at-all-here"}
            )
            assert response.status == 403
            body = await response.json()
            assert body["error"] == "admin_api_disabled"
            assert "admin.token" in body["message"]
        for path in ("/metrics", "/healthz", "/ready", "/v1/admin/openapi.json"):
            assert (await client.get(path)).status == 200, path


# -- auth -------------------------------------------------------------------------------


async def test_health_and_metrics_need_no_token(http: aiohttp.ClientSession) -> None:
    for path in ("/metrics", "/healthz", "/ready", "/v1/admin/openapi.json"):
        status, _ = await call(http, "GET", path, token=None)
        assert status == 200, path
    status, ready = await call(http, "GET", "/ready", token=None)
    assert ready == {"ready": True, "checks": {"store": True, "embedder": True}}


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token-0123456789", f"Basic {ADMIN}", "Bearer", f"Bearer {ADMIN}x"],
)
async def test_missing_or_wrong_token_is_401(
    http: aiohttp.ClientSession, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    async with http.get(f"{base('alice-x')}/memories", headers=headers) as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await response.json())["error"] == "unauthorized"


async def test_scoped_token_reaches_only_its_users(http: aiohttp.ClientSession) -> None:
    alice, bob = new_user("alice"), new_user("bob")
    await add(http, bob, "Bob keeps his bike in the garage.")
    status, _ = await call(http, "GET", f"{base(alice)}/memories", token=SCOPED)
    assert status == 200
    for method, path in (
        ("GET", f"{base(bob)}/memories"),
        ("GET", f"{base(bob)}/search?q=bike"),
        ("GET", f"{base(bob)}/export"),
        ("DELETE", base(bob)),
    ):
        status, body = await call(http, method, path, token=SCOPED)
        assert status == 403, (method, path)
        assert body["error"] == "forbidden"
    # bob's memories are untouched, and the all-users token still reads them
    status, page = await call(http, "GET", f"{base(bob)}/memories")
    assert status == 200
    assert page["total"] == 1
    # Import keeps ids (one namespace for all users): all-users tokens only.
    status, body = await call(http, "POST", f"{base(alice)}/import", token=SCOPED, data="")
    assert status == 403
    assert "all users" in body["message"]


# -- isolation --------------------------------------------------------------------------


async def test_another_users_memory_is_not_found(http: aiohttp.ClientSession) -> None:
    alice, bob = new_user("alice"), new_user("bob")
    mine = await add(http, alice, "Alice's locker code is 4711.")
    for method, suffix, body in (
        ("GET", "", None),
        ("PATCH", "", {"importance": 1.0}),
        ("DELETE", "", None),
        ("GET", "/history", None),
    ):
        status, reply = await call(
            http, method, f"{base(bob)}/memories/{mine}{suffix}", json_body=body
        )
        assert status == 404, (method, suffix, reply)
        assert reply["error"] == "not_found"
    # An id that exists nowhere gets the very same answer: existence does not leak.
    status, absent = await call(http, "GET", f"{base(bob)}/memories/m{'0' * 31}")
    assert status == 404
    status, foreign = await call(http, "GET", f"{base(bob)}/memories/{mine}")
    assert absent == foreign
    status, page = await call(http, "GET", f"{base(bob)}/memories")
    assert page["total"] == 0
    status, found = await call(http, "GET", f"{base(bob)}/search", params={"q": "locker code"})
    assert status == 200
    assert found["items"] == []
    # ... and alice's memory is still there, unchanged.
    status, memory = await call(http, "GET", f"{base(alice)}/memories/{mine}")
    assert status == 200
    assert memory["importance"] == 0.5


# -- CRUD -------------------------------------------------------------------------------


async def test_crud(http: aiohttp.ClientSession) -> None:
    user = new_user()
    first = await add(
        http, user, "User prefers window seats.", memory_type="procedural", importance=0.9
    )
    status, again = await call(
        http, "POST", f"{base(user)}/memories", json_body={"content": "User prefers window seats."}
    )
    assert status == 200
    assert again["created"] is False
    assert again["memory"]["id"] == first
    second = await add(http, user, "User's daughter plays the cello.", session_id="s-42")
    third = await add(http, user, "User runs a marathon every spring.")

    status, memory = await call(http, "GET", f"{base(user)}/memories/{first}")
    assert status == 200
    assert memory["memory_type"] == "procedural"
    assert memory["importance"] == 0.9
    assert memory["source"] == "admin"
    assert memory["abstract"] == "User prefers window seats."  # the write path's enrichment
    assert memory["category_id"]  # filed under a category
    assert "embedding" not in memory

    status, page = await call(http, "GET", f"{base(user)}/memories", params={"limit": "2"})
    assert (page["total"], page["next_offset"], len(page["items"])) == (3, 2, 2)
    assert [m["id"] for m in page["items"]] == [third, second]  # newest first
    status, rest = await call(
        http, "GET", f"{base(user)}/memories", params={"limit": "2", "offset": "2"}
    )
    assert [m["id"] for m in rest["items"]] == [first]
    assert rest["next_offset"] is None
    status, typed = await call(
        http, "GET", f"{base(user)}/memories", params={"memory_type": "procedural"}
    )
    assert [m["id"] for m in typed["items"]] == [first]
    status, session = await call(
        http, "GET", f"{base(user)}/memories", params={"session_id": "s-42"}
    )
    assert [m["id"] for m in session["items"]] == [second]

    # A new text is embedded again: search finds the new wording, the id stays.
    status, updated = await call(
        http,
        "PATCH",
        f"{base(user)}/memories/{third}",
        json_body={"content": "User swims in the lake every morning.", "confidence": 0.7},
    )
    assert status == 200
    assert updated["id"] == third
    assert updated["content"] == "User swims in the lake every morning."
    assert updated["abstract"] == "User swims in the lake every morning."
    assert updated["confidence"] == 0.7
    assert updated["updated_at"] > updated["created_at"] or updated["updated_at"] > 0
    status, found = await call(
        http, "GET", f"{base(user)}/search", params={"q": "swimming in a lake", "top_k": "1"}
    )
    assert [hit["memory"]["id"] for hit in found["items"]] == [third]

    status, deleted = await call(http, "DELETE", f"{base(user)}/memories/{second}")
    assert (status, deleted) == (200, {"deleted": second})
    status, _ = await call(http, "GET", f"{base(user)}/memories/{second}")
    assert status == 404
    status, page = await call(http, "GET", f"{base(user)}/memories")
    assert page["total"] == 2
    status, found = await call(http, "GET", f"{base(user)}/search", params={"q": "cello"})
    assert second not in [hit["memory"]["id"] for hit in found["items"]]


async def test_memories_added_with_a_topic_share_its_category(
    http: aiohttp.ClientSession,
) -> None:
    user = new_user()
    first = await add(http, user, "User flew to Lisbon in May.", topic="Travel")
    second = await add(http, user, "User's passport expires next year.", topic="  travel ")
    _, one = await call(http, "GET", f"{base(user)}/memories/{first}")
    _, two = await call(http, "GET", f"{base(user)}/memories/{second}")
    assert one["category_id"] == two["category_id"] == topic_id(owner_id(user), "travel")
    status, body = await call(
        http, "POST", f"{base(user)}/memories", json_body={"content": "x y", "topic": "t" * 201}
    )
    assert status == 400, body


async def test_validation_errors_name_every_field(http: aiohttp.ClientSession) -> None:
    user = new_user()
    status, body = await call(
        http,
        "POST",
        f"{base(user)}/memories",
        json_body={"content": " ", "importance": 2, "bogus": 1, "visibility": "group"},
    )
    assert status == 400
    paths = sorted(error["path"] for error in body["errors"])
    assert paths == ["body.bogus", "body.content", "body.importance"], body
    status, body = await call(
        http, "GET", f"{base(user)}/memories", params={"limit": "0", "status": "gone"}
    )
    assert status == 400
    assert sorted(e["path"] for e in body["errors"]) == ["query.limit", "query.status"]
    status, body = await call(http, "POST", f"{base(user)}/memories", data=b"{not json")
    assert status == 400
    assert body["errors"][0]["path"] == "body"
    deep = b'{"content": ' + b"[" * 5_000 + b"]" * 5_000 + b"}"
    status, body = await call(http, "POST", f"{base(user)}/memories", data=deep)
    assert status == 400
    assert body["errors"][0]["message"] == "not valid JSON: nested too deep"
    status, body = await call(http, "PATCH", f"{base(user)}/memories/m1", json_body={})
    assert status == 400
    assert "nothing to update" in body["errors"][0]["message"]
    status, body = await call(http, "GET", f"{base('bad%01user')}/memories")
    assert status == 400
    assert body["errors"][0]["path"] == "path.user"
    status, body = await call(http, "GET", f"{base(user)}/memories/{'m' * 65}")
    assert status == 400
    assert body["errors"][0]["path"] == "path.memory_id"
    status, body = await call(http, "GET", f"{base(user)}/search")
    assert status == 400
    assert body["errors"][0]["path"] == "query.q"


# -- history ----------------------------------------------------------------------------


async def test_history_follows_the_write_paths_supersession_chain(
    sidecar: Sidecar, http: aiohttp.ClientSession
) -> None:
    user = new_user()
    await say(sidecar, user, "I live in Berlin.", 1_700_000_000_000)
    await say(sidecar, user, "I moved to Lisbon last month.", 1_700_000_100_000)
    status, page = await call(http, "GET", f"{base(user)}/memories", params={"status": "all"})
    by_status = {m["status"]: m for m in page["items"]}
    old, new = by_status["superseded"], by_status["active"]
    assert old["superseded_by"] == new["id"]

    status, history = await call(http, "GET", f"{base(user)}/memories/{new['id']}/history")
    assert status == 200
    assert [m["id"] for m in history["chain"]] == [old["id"], new["id"]]
    assert history["supersedes"] == [old["id"]]
    assert history["superseded_by"] is None
    status, history = await call(http, "GET", f"{base(user)}/memories/{old['id']}/history")
    assert [m["id"] for m in history["chain"]] == [old["id"], new["id"]]
    assert history["superseded_by"] == new["id"]
    assert history["supersedes"] == []


# -- forget, export, import -------------------------------------------------------------


def rows(text: str) -> list[dict[str, Any]]:
    return sorted((json.loads(line) for line in text.splitlines() if line), key=lambda r: r["id"])


async def test_forget_then_import_restores_the_same_memories(
    sidecar: Sidecar, http: aiohttp.ClientSession
) -> None:
    user, other = new_user(), new_user("bob")
    await say(sidecar, user, "I live in Berlin.", 1_700_000_000_000)
    await say(sidecar, user, "I moved to Lisbon last month.", 1_700_000_100_000)
    await say(sidecar, user, "My sister's name is Ana.", 1_700_000_200_000)
    await add(http, user, "User prefers window seats.", memory_type="procedural", session_id="s1")
    await add(http, other, "Bob's favourite tea is oolong.")

    status, exported = await call(
        http, "GET", f"{base(user)}/export", params={"embeddings": "true"}
    )
    assert status == 200
    before = rows(exported)
    kinds = {(r["node_type"], r["status"]) for r in before}
    assert {("memory", "active"), ("memory", "superseded"), ("category", "active")} <= kinds
    assert all(len(r["embedding"]) == 384 for r in before)
    assert {r["user_id"] for r in before} == {user}

    pipeline, profile = sidecar.components.read.pipeline, sidecar.components.config.defaults
    asked = MemoryRequest(text="Where do I live?", history=(), scope=Scope(user), profile=profile)
    await pipeline.run(asked)
    vectors = pipeline.caches.vectors
    assert vectors is not None
    assert vectors.get(user, "Where do I live?") is not None
    status, report = await call(http, "DELETE", base(user))
    assert vectors.get(user, "Where do I live?") is None
    assert status == 200
    assert report["deleted"]["rows"] == len(before)
    assert report["deleted"]["memories"] == {"active": 3, "superseded": 1}
    assert report["deleted"]["categories"] == len(before) - 4
    assert report["journal"]["unwritten_turns_dropped"] == 0
    status, page = await call(http, "GET", f"{base(user)}/memories", params={"status": "all"})
    assert page["total"] == 0
    status, text = await call(http, "GET", f"{base(user)}/export")
    assert text == ""
    status, found = await call(
        http, "GET", f"{base(user)}/search", params={"q": "Where do I live?"}
    )
    assert found["items"] == []
    status, page = await call(http, "GET", f"{base(other)}/memories")
    assert page["total"] == 1  # nobody else's rows
    # Nothing the request path cached of their queries is left.
    assert pipeline.forget_user(user) == 0

    status, imported = await call(http, "POST", f"{base(user)}/import", data=exported)
    assert status == 200, imported
    assert (imported["lines"], imported["embedded"]) == (len(before), 0)
    status, again = await call(http, "GET", f"{base(user)}/export", params={"embeddings": "true"})
    after = rows(again)
    assert [r["id"] for r in after] == [r["id"] for r in before]
    for old, new in zip(before, after, strict=True):
        old_vector, new_vector = old.pop("embedding"), new.pop("embedding")
        assert new == old
        assert max(abs(a - b) for a, b in zip(old_vector, new_vector, strict=True)) < 1e-6
    status, found = await call(
        http, "GET", f"{base(user)}/search", params={"q": "Where do I live?", "top_k": "1"}
    )
    assert found["items"][0]["memory"]["content"] == "User moved to Lisbon in October 2023."


async def test_import_without_vectors_embeds_them(http: aiohttp.ClientSession) -> None:
    user = new_user()
    lines = [
        {"content": "User is learning Portuguese.", "memory_type": "episodic"},
        {"id": "m-imported-1", "content": "User owns a red kayak.", "importance": 0.8},
    ]
    body = "\n".join(json.dumps(line) for line in lines) + "\n\n"
    status, report = await call(http, "POST", f"{base(user)}/import", data=body)
    assert status == 200, report
    assert (report["lines"], report["memories"], report["embedded"]) == (2, 2, 2)
    status, memory = await call(http, "GET", f"{base(user)}/memories/m-imported-1")
    assert memory["importance"] == 0.8
    assert memory["category_id"]
    status, found = await call(
        http, "GET", f"{base(user)}/search", params={"q": "kayak", "top_k": "1"}
    )
    assert found["items"][0]["memory"]["id"] == "m-imported-1"


async def test_invalid_imports_write_nothing(http: aiohttp.ClientSession) -> None:
    owner, user = new_user(), new_user()
    taken = await add(http, owner, "Owner's cat is called Miso.")
    lines = [
        json.dumps({"content": "User likes jazz."}),
        json.dumps({"content": "User likes blues.", "importance": 7}),
        "{oops",
        json.dumps({"content": "User likes soul.", "user_id": owner}),
        json.dumps({"content": "x", "node_type": "category"}),
        json.dumps({"content": "User likes funk.", "embedding": [0.1, 0.2]}),
        "[" * 5_000 + "]" * 5_000,  # nested too deep to parse
    ]
    status, body = await call(http, "POST", f"{base(user)}/import", data="\n".join(lines))
    assert status == 400
    paths = [error["path"] for error in body["errors"]]
    assert paths == ["line 2.importance", "line 3", "line 4.user_id", "line 5", "line 7"], body
    status, page = await call(http, "GET", f"{base(user)}/memories")
    assert page["total"] == 0
    # An id that another user's row holds would take that row over.
    hijack = json.dumps({"id": taken, "content": "User likes punk."})
    status, body = await call(http, "POST", f"{base(user)}/import", data=hijack)
    assert status == 400
    assert "another row" in body["errors"][0]["message"]
    status, memory = await call(http, "GET", f"{base(owner)}/memories/{taken}")
    assert memory["content"] == "Owner's cat is called Miso."


# -- what the calls leave behind --------------------------------------------------------


async def test_admin_calls_are_counted_and_logged_without_content(
    sidecar: Sidecar, http: aiohttp.ClientSession, captured_logs: list[logging.LogRecord]
) -> None:
    user = new_user()
    secret = "User's bank PIN is 9137."
    await add(http, user, secret)
    async with http.get(
        f"{base(user)}/memories",
        headers={"Authorization": f"Bearer {ADMIN}", "x-request-id": "admin-req-7"},
    ) as response:
        assert response.status == 200
        assert response.headers["x-request-id"] == "admin-req-7"
    status, _ = await call(http, "DELETE", base(user))
    assert status == 200
    metrics = sidecar.components.metrics
    labels = {"operation": "list", "status": "200"}
    assert metrics.value("memory_sidecar_admin_requests_total", labels) >= 1
    assert metrics.value("memory_sidecar_admin_rows_total", {"operation": "forget"}) >= 1
    text = "\n".join(JsonFormatter().format(record) for record in captured_logs)
    assert "admin list status=200" in text
    assert '"request_id": "admin-req-7"' in text
    assert "PIN" not in text
    assert "9137" not in text
    assert user not in text  # nor user ids


def test_committed_docs_exist() -> None:
    root = Path(__file__).resolve().parents[2]
    assert (root / "docs" / "admin-openapi.json").is_file()
