"""Every write path takes a turn's decision: an admin add (API, CLI) or a changed
text that gives an attribute another value supersedes the old memory, a
restatement is a no-op, a richer wording updates the memory it restates — and the
request path then injects only the current value. An import's new facts (lines
without an id) take the same decision; an export's lines restore their rows."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from sidecar.memory.read.pipeline import MemoryRequest
from sidecar.memory.records.records import Scope
from sidecar.runtime.server import Sidecar
from tests.admin.test_api import base, call, new_user, say


async def memories(http: aiohttp.ClientSession, user: str, status: str) -> list[dict[str, Any]]:
    code, page = await call(http, "GET", f"{base(user)}/memories", params={"status": status})
    assert code == 200, page
    return list(page["items"])


async def injected(sidecar: Sidecar, user: str, question: str) -> str:
    config = sidecar.components.config
    request = MemoryRequest(text=question, history=(), scope=Scope(user), profile=config.defaults)
    outcome = await sidecar.components.read.pipeline.run(request)
    return outcome.block.text


async def test_an_added_change_supersedes_what_chat_stored(
    sidecar: Sidecar, http: aiohttp.ClientSession
) -> None:
    user = new_user()
    await say(sidecar, user, "I moved to Lisbon last month.", 1_700_000_000_000)
    assert "Lisbon" in await injected(sidecar, user, "Where do I live?")

    code, body = await call(
        http, "POST", f"{base(user)}/memories", json_body={"content": "User lives in Porto."}
    )
    assert code == 201, body
    assert body["decision"] == "supersede"
    assert body["created"] is True
    [old] = await memories(http, user, "superseded")
    assert "Lisbon" in old["content"]
    assert body["replaced"] == old["id"]
    assert old["superseded_by"] == body["memory"]["id"]
    block = await injected(sidecar, user, "Where do I live?")
    assert "Porto" in block
    assert "Lisbon" not in block

    code, history = await call(http, "GET", f"{base(user)}/memories/{body['memory']['id']}/history")
    assert [m["id"] for m in history["chain"]] == [old["id"], body["memory"]["id"]]


async def test_a_restatement_is_a_no_op_and_a_new_fact_is_added(
    sidecar: Sidecar, http: aiohttp.ClientSession
) -> None:
    user = new_user()
    await say(sidecar, user, "I'm allergic to peanuts.", 1_700_000_000_000)
    [stored] = await memories(http, user, "active")
    code, body = await call(
        http,
        "POST",
        f"{base(user)}/memories",
        json_body={"content": "User is allergic to peanuts!"},
    )
    assert (code, body["decision"], body["created"]) == (200, "noop", False)
    assert body["memory"]["id"] == stored["id"]
    assert len(await memories(http, user, "active")) == 1
    code, body = await call(
        http, "POST", f"{base(user)}/memories", json_body={"content": "User plays the cello."}
    )
    assert (code, body["decision"], body["replaced"]) == (201, "add", None)
    assert len(await memories(http, user, "superseded")) == 0


async def test_a_near_miss_is_never_merged_or_superseded(
    sidecar: Sidecar, http: aiohttp.ClientSession
) -> None:
    user = new_user()
    await say(sidecar, user, "My dog is allergic to chicken.", 1_700_000_000_000)
    code, body = await call(
        http,
        "POST",
        f"{base(user)}/memories",
        json_body={"content": "User's dog is allergic to beef."},
    )
    assert (code, body["decision"]) == (201, "add")
    assert len(await memories(http, user, "active")) == 2


async def test_new_words_for_a_memory_supersede_the_value_they_change(
    sidecar: Sidecar, http: aiohttp.ClientSession
) -> None:
    user = new_user()
    await say(sidecar, user, "I live in Leeds.", 1_700_000_000_000)
    await say(sidecar, user, "I work as a nurse.", 1_700_000_100_000)
    [job] = [m for m in await memories(http, user, "active") if "nurse" in m["content"]]
    code, changed = await call(
        http,
        "PATCH",
        f"{base(user)}/memories/{job['id']}",
        json_body={"content": "User lives in Bristol and works as a nurse."},
    )
    assert code == 200, changed
    assert changed["id"] == job["id"]
    [old] = await memories(http, user, "superseded")
    assert "Leeds" in old["content"]
    assert old["superseded_by"] == job["id"]
    assert "Leeds" not in await injected(sidecar, user, "Which city do I live in?")


async def test_an_imported_new_fact_is_judged_and_an_export_is_restored(
    sidecar: Sidecar, http: aiohttp.ClientSession
) -> None:
    """A memory line without an id or a time is a new fact: it takes a turn's decision (here it
    supersedes what chat stored, and its restatement is a no-op); a line with an id
    (an export's) restores the row as it was, its status included."""
    user = new_user()
    await say(sidecar, user, "I moved to Lisbon last month.", 1_700_000_000_000)
    lines = [
        {"content": "User lives in Porto."},
        {"content": "User lives in Porto!"},
        {"content": "User plays the cello."},
    ]
    body = "\n".join(json.dumps(line) for line in lines) + "\n"
    code, report = await call(http, "POST", f"{base(user)}/import", data=body)
    assert code == 200, report
    assert report["decisions"] == {"supersede": 1, "noop": 1, "add": 1}
    [old] = await memories(http, user, "superseded")
    assert "Lisbon" in old["content"]
    block = await injected(sidecar, user, "Where do I live?")
    assert "Porto" in block
    assert "Lisbon" not in block

    # The export, restored after the user is forgotten: every row as it was.
    code, exported = await call(http, "GET", f"{base(user)}/export")
    before = sorted((m["id"], m["status"]) for m in await memories(http, user, "all"))
    code, _ = await call(http, "DELETE", base(user))
    assert code == 200
    code, report = await call(http, "POST", f"{base(user)}/import", data=exported)
    assert code == 200, report
    assert report["decisions"] == {}
    after = sorted((m["id"], m["status"]) for m in await memories(http, user, "all"))
    assert after == before
