"""Bad input through the real Envoy: every request either passes through
byte-identical, gets memory injected correctly, or gets a clear error — never a
crash — and the sidecar counts why it stepped aside."""

from __future__ import annotations

import base64
import gzip
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.stack import Stack, running_stack
from scripts.bench_isolation import SMALL_CLIENTS, run_phase, seed

pytestmark = pytest.mark.e2e

USER = "bad-input-user"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("bad-input")) as running:
        seed = json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "I live in Lisbon."}]}
        ).encode()
        post(running, "/v1/chat/completions", seed)
        deadline = time.monotonic() + 30
        while running.sidecar_metric("memory_sidecar_turns_total", {"outcome": "written"}) < 1:
            assert time.monotonic() < deadline, "the seed turn was not written"
            time.sleep(0.05)
        yield running


def post(
    stack: Stack, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(
        stack.route_url(path),
        data=body,
        headers={"content-type": "application/json", "x-user-id": USER, **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def last_upstream(stack: Stack) -> dict[str, Any]:
    seen = [r for r in stack.mock_requests() if r["headers"].get("x-user-id") == USER]
    return seen[-1]


def raw(record: dict[str, Any]) -> bytes:
    return base64.b64decode(record["raw_body_b64"])


def passthrough(stack: Stack, reason: str) -> float:
    return stack.sidecar_metric("memory_sidecar_passthrough_total", {"reason": reason})


def chat(text: Any, **extra: Any) -> bytes:
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": text}], **extra}
    ).encode()


@pytest.mark.parametrize(
    ("name", "body", "headers", "reason"),
    [
        ("malformed", b'{"messages": [', {}, "not_chat_json"),
        ("truncated", chat("Where do I live?")[:-7], {}, "not_chat_json"),
        ("not utf-8", b'{"messages":[{"role":"user","content":"\xff\xfe"}]}', {}, "not_chat_json"),
        ("no messages", b'{"model": "m"}', {}, "not_chat_json"),
        ("empty messages", b'{"model":"m","messages":[]}', {}, "no_user_message"),
        ("wrong content type", chat("Where do I live?"), {"content-type": "text/plain"},
         "not_json_content_type"),
    ],
)  # fmt: skip
def test_unusable_bodies_pass_through_byte_identical(
    stack: Stack, name: str, body: bytes, headers: dict[str, str], reason: str
) -> None:
    before = passthrough(stack, reason)
    status, _, response_headers = post(stack, "/v1/chat/completions", body, headers)
    assert status in (200, 400), name  # the upstream's own answer, not ours
    assert raw(last_upstream(stack)) == body
    assert passthrough(stack, reason) == before + 1
    assert "x-memory-injected" not in {k.lower() for k in response_headers}


def test_gzip_body_passes_through(stack: Stack) -> None:
    before = passthrough(stack, "encoded_body")
    body = gzip.compress(chat("Where do I live?"))
    status, _, _ = post(stack, "/v1/chat/completions", body, {"content-encoding": "gzip"})
    assert status in (200, 400)
    assert passthrough(stack, "encoded_body") == before + 1


def test_other_paths_are_untouched(stack: Stack) -> None:
    before = passthrough(stack, "other_path")
    status, _, _ = post(stack, "/v1/completions", chat("Where do I live?"))
    assert status in (200, 404, 405)
    assert passthrough(stack, "other_path") == before + 1


@pytest.mark.parametrize("size_mib", [1.5, 5.0])
def test_large_bodies_are_processed(stack: Stack, size_mib: float) -> None:
    filler = "x" * int(size_mib * 1024 * 1024)
    body = json.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": filler},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "Where do I live?"},
            ],
        }
    ).encode()
    status, _, headers = post(stack, "/v1/chat/completions", body)
    assert status == 200
    assert int(headers["x-memory-injected"]) >= 1
    seen = last_upstream(stack)
    forwarded = raw(seen)
    assert int(seen["headers"]["content-length"]) == len(forwarded)
    messages = json.loads(forwarded)["messages"]
    # The conversation as sent, the memories right before the latest user message.
    assert [m["content"][:10] for m in messages[:2]] == [filler[:10], "ok"]
    assert messages[2]["role"] == "system"
    assert "Lisbon" in messages[2]["content"]
    assert messages[3] == {"role": "user", "content": "Where do I live?"}


def test_bodies_over_the_buffer_limit_get_a_clear_error(stack: Stack) -> None:
    body = chat("y" * (9 * 1024 * 1024))
    status, _, _ = post(stack, "/v1/chat/completions", body)
    assert status == 413


def test_multimodal_and_tool_calls_keep_their_structure(stack: Stack) -> None:
    body = json.dumps(
        {
            "model": "m",
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
            "messages": [
                {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "1", "type": "function",
                                 "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "1", "content": "42"},
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "text", "text": "Where do I live?"},
                ]},
            ],
        }
    ).encode()  # fmt: skip
    status, _, headers = post(stack, "/v1/chat/completions", body)
    assert status == 200
    assert int(headers["x-memory-injected"]) >= 1
    forwarded = json.loads(raw(last_upstream(stack)))
    original = json.loads(body)
    assert forwarded["tools"] == original["tools"]
    assert forwarded["messages"][:2] == original["messages"][:2]
    assert forwarded["messages"][2]["role"] == "system"
    assert forwarded["messages"][2]["content"].startswith("<memory>")
    assert forwarded["messages"][3:] == original["messages"][2:]


def test_huge_messages_from_some_users_never_cost_the_others_their_memory(stack: Stack) -> None:
    """Three clients send 4 MiB messages in a loop while eight ask small questions:
    every small request is answered with its memory (no ext_proc timeout, no
    fail-open). The latency figures are scripts.bench_isolation's."""
    users = [f"small-{i}-{time.monotonic_ns()}" for i in range(SMALL_CLIENTS)]
    seed(stack, users)
    phase = run_phase(stack, "big, memory", users, "/v1", mib=4.0, seconds=6.0)
    assert phase.big >= 3
    assert len(phase.small) >= SMALL_CLIENTS
    assert phase.errors == 0
    assert phase.without_memory == 0
