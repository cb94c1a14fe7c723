"""The mock LLM's HTTP service (``e2e/mock_service.py``): echo answers, JSON and SSE
streaming, models and health, the request log, and the task handler registry.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from e2e.mock_llm import MockLLM, start_mock
from e2e.mock_protocol import format_task_tag
from tests.e2e_support.mock_llm_support import ask, extract_messages

SYSTEM_PROMPT = "You are a helpful assistant.\n\n<memories>\n- User lives in Berlin.\n</memories>"


# ---------------------------------------------------------------------------
# Echo mode
# ---------------------------------------------------------------------------


async def test_echo_contains_every_message_including_system_prompt(
    mock: MockLLM, client: AsyncOpenAI
) -> None:
    completion = await client.chat.completions.create(
        model="my-upstream-model",
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "Where do I live?"},
        ],
    )
    assert completion.model == "my-upstream-model"
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.content == f"ECHO\n[system] {SYSTEM_PROMPT}\n[user] Where do I live?"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == len(SYSTEM_PROMPT.split()) + 4
    assert completion.usage.completion_tokens == len(choice.message.content.split())
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )
    assert mock.stats()["echo"] == 1


async def test_echo_flattens_content_parts(client: AsyncOpenAI) -> None:
    content = await ask(
        client,
        [
            {"role": "system", "content": "sys"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "first part"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "text", "text": "second part"},
                ],
            },
        ],
    )
    assert content == "ECHO\n[system] sys\n[user] first part\nsecond part"


async def test_json_response_format_makes_echo_valid_json(client: AsyncOpenAI) -> None:
    content = await ask(
        client,
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        response_format={"type": "json_object"},
    )
    assert json.loads(content) == {"echo": "ECHO\n[system] S\n[user] U"}


async def test_stream_reassembles_to_the_non_stream_answer(client: AsyncOpenAI) -> None:
    messages: Any = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Tell me a long story about the sea and the sky."},
    ]
    expected = await ask(client, messages)

    stream = await client.chat.completions.create(
        model="test-model",
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces: list[str] = []
    roles: list[str] = []
    finish_reasons: list[str] = []
    usage = None
    chunks = 0
    async for chunk in stream:
        chunks += 1
        assert chunk.object == "chat.completion.chunk"
        assert chunk.model == "test-model"
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish_reasons.append(choice.finish_reason)

    assert "".join(pieces) == expected
    assert len(pieces) > 1
    assert chunks > 2
    assert roles == ["assistant"]
    assert finish_reasons == ["stop"]
    assert usage is not None
    assert usage.completion_tokens == len(expected.split())


async def test_raw_sse_wire_format(mock: MockLLM, http: aiohttp.ClientSession) -> None:
    mock.configure(stream_chunks=3)
    body = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "one two three four five six"}],
    }
    async with http.post(f"{mock.base_url}/chat/completions", json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        raw = await resp.text()

    assert raw.endswith("data: [DONE]\n\n")
    events = raw.split("\n\n")
    assert events[-1] == ""
    payloads = [e.removeprefix("data: ") for e in events[:-1]]
    assert all(e.startswith("data: ") for e in events[:-1])
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content_chunks = [c for c in chunks if c["choices"][0]["delta"].get("content")]
    assert len(content_chunks) == 3
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    assert all("usage" not in c for c in chunks)  # no include_usage asked for


async def test_sync_openai_client_streaming_and_not(mock: MockLLM) -> None:
    def call() -> tuple[str, str]:
        with OpenAI(base_url=mock.base_url, api_key="x", max_retries=0) as c:
            messages: Any = [{"role": "user", "content": "hello sync world"}]
            plain = c.chat.completions.create(model="m", messages=messages)
            streamed = "".join(
                chunk.choices[0].delta.content or ""
                for chunk in c.chat.completions.create(model="m", messages=messages, stream=True)
                if chunk.choices
            )
            return plain.choices[0].message.content or "", streamed

    plain, streamed = await asyncio.to_thread(call)
    assert plain == "ECHO\n[user] hello sync world"
    assert streamed == plain


async def test_models_and_health(
    mock: MockLLM, client: AsyncOpenAI, http: aiohttp.ClientSession
) -> None:
    models = await client.models.list()
    assert [m.id for m in models.data] == ["mock-llm"]
    async with http.get(f"{mock.url}/health") as resp:
        assert resp.status == 200
        assert await resp.json() == {"status": "ok"}


# ---------------------------------------------------------------------------
# Request log
# ---------------------------------------------------------------------------


async def test_request_log_records_chat_requests_only(
    mock: MockLLM, client: AsyncOpenAI, http: aiohttp.ClientSession
) -> None:
    await ask(
        client, [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "hi"}]
    )
    await ask(client, extract_messages("I live in Berlin."))
    await client.models.list()

    async with http.get(f"{mock.url}/_mock/requests") as resp:
        recorded = await resp.json()
    assert len(recorded) == 2
    first = recorded[0]
    assert first["path"] == "/v1/chat/completions"
    assert first["headers"]["authorization"] == "Bearer x"
    assert all(name == name.lower() for name in first["headers"])
    assert first["body"]["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert first["body"]["model"] == "test-model"
    assert recorded == mock.requests()
    assert [r["body"]["messages"][1]["content"] for r in mock.upstream_requests()] == ["hi"]
    assert len(mock.task_requests("extract")) == 1

    async with http.delete(f"{mock.url}/_mock/requests") as resp:
        assert resp.status == 200
    async with http.get(f"{mock.url}/_mock/requests") as resp:
        assert await resp.json() == []


async def test_request_log_is_bounded(http: aiohttp.ClientSession) -> None:
    async with await start_mock(max_requests=2) as mock:
        for i in range(4):
            body = {"model": "m", "messages": [{"role": "user", "content": f"msg {i}"}]}
            async with http.post(f"{mock.base_url}/chat/completions", json=body) as resp:
                assert resp.status == 200
        assert [r["body"]["messages"][0]["content"] for r in mock.requests()] == [
            "msg 2",
            "msg 3",
        ]


# ---------------------------------------------------------------------------
# The task handler registry
# ---------------------------------------------------------------------------


async def test_unknown_task_is_a_client_error(client: AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="no handler for task 'nonexistent'"):
        await ask(
            client,
            [
                {"role": "system", "content": "[memory-sidecar:nonexistent v1] do it"},
                {"role": "user", "content": "x"},
            ],
        )


async def test_custom_task_handler_registry() -> None:
    def rewrite(body: Mapping[str, Any]) -> str:
        return json.dumps({"query": body["messages"][-1]["content"].upper()})

    async with (
        await start_mock(task_handlers={"rewrite": rewrite}) as mock,
        AsyncOpenAI(base_url=mock.base_url, api_key="x", max_retries=0) as client,
    ):
        content = await ask(
            client,
            [
                {"role": "system", "content": f"{format_task_tag('rewrite')} Rewrite."},
                {"role": "user", "content": "where do i live"},
            ],
        )
        assert json.loads(content) == {"query": "WHERE DO I LIVE"}
        assert mock.stats()["tasks"] == {"rewrite": 1}
