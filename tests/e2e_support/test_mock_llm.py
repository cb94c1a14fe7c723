"""Tests for the deterministic mock OpenAI-compatible LLM server (``e2e/mock_llm.py``)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.chat import ChatCompletion

from e2e.mock_llm import (
    MockConfig,
    MockLLM,
    extract_facts,
    format_task_tag,
    parse_extract_turn,
    parse_task_tag,
    start_mock,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

SYSTEM_PROMPT = "You are a helpful assistant.\n\n<memories>\n- User lives in Berlin.\n</memories>"
EXTRACT_SYSTEM = (
    f"{format_task_tag('extract', 1)} Extract durable facts about the user from the turn. "
    'Answer with JSON: {"facts": [{"text", "type", "importance"}]}.'
)


def turn(user: str, assistant: str = "Noted.") -> str:
    return f"Turn time: 2026-11-22T10:00:00Z\nUser: {user}\nAssistant: {assistant}"


def extract_messages(user: str, assistant: str = "Noted.") -> list[dict[str, str]]:
    return [
        {"role": "system", "content": EXTRACT_SYSTEM},
        {"role": "user", "content": turn(user, assistant)},
    ]


@pytest.fixture
async def client(mock_llm: MockLLM) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=mock_llm.base_url, api_key="x", max_retries=0) as c:
        yield c


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def ask(client: AsyncOpenAI, messages: Any, **kwargs: Any) -> str:
    """One non-streamed completion; ``messages`` is loosely typed for odd shapes."""
    completion: ChatCompletion = await client.chat.completions.create(
        model="test-model", messages=messages, **kwargs
    )
    content = completion.choices[0].message.content
    assert content is not None
    return content


# ---------------------------------------------------------------------------
# Echo mode
# ---------------------------------------------------------------------------


async def test_echo_contains_every_message_including_system_prompt(
    mock_llm: MockLLM, client: AsyncOpenAI
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
    assert mock_llm.stats()["echo"] == 1


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


async def test_raw_sse_wire_format(mock_llm: MockLLM, http: aiohttp.ClientSession) -> None:
    mock_llm.configure(stream_chunks=3)
    body = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "one two three four five six"}],
    }
    async with http.post(f"{mock_llm.base_url}/chat/completions", json=body) as resp:
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


async def test_sync_openai_client_streaming_and_not(mock_llm: MockLLM) -> None:
    def call() -> tuple[str, str]:
        with OpenAI(base_url=mock_llm.base_url, api_key="x", max_retries=0) as c:
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
    mock_llm: MockLLM, client: AsyncOpenAI, http: aiohttp.ClientSession
) -> None:
    models = await client.models.list()
    assert [m.id for m in models.data] == ["mock-llm"]
    async with http.get(f"{mock_llm.url}/health") as resp:
        assert resp.status == 200
        assert await resp.json() == {"status": "ok"}


# ---------------------------------------------------------------------------
# Request log
# ---------------------------------------------------------------------------


async def test_request_log_records_chat_requests_only(
    mock_llm: MockLLM, client: AsyncOpenAI, http: aiohttp.ClientSession
) -> None:
    await ask(
        client, [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "hi"}]
    )
    await ask(client, extract_messages("I live in Berlin."))
    await client.models.list()

    async with http.get(f"{mock_llm.url}/_mock/requests") as resp:
        recorded = await resp.json()
    assert len(recorded) == 2
    first = recorded[0]
    assert first["path"] == "/v1/chat/completions"
    assert first["headers"]["authorization"] == "Bearer x"
    assert all(name == name.lower() for name in first["headers"])
    assert first["body"]["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert first["body"]["model"] == "test-model"
    assert recorded == mock_llm.requests()
    assert [r["body"]["messages"][1]["content"] for r in mock_llm.upstream_requests()] == ["hi"]
    assert len(mock_llm.task_requests("extract")) == 1

    async with http.delete(f"{mock_llm.url}/_mock/requests") as resp:
        assert resp.status == 200
    async with http.get(f"{mock_llm.url}/_mock/requests") as resp:
        assert await resp.json() == []


async def test_request_log_is_bounded(http: aiohttp.ClientSession) -> None:
    async with await start_mock(max_requests=2) as mock_llm:
        for i in range(4):
            body = {"model": "m", "messages": [{"role": "user", "content": f"msg {i}"}]}
            async with http.post(f"{mock_llm.base_url}/chat/completions", json=body) as resp:
                assert resp.status == 200
        assert [r["body"]["messages"][0]["content"] for r in mock_llm.requests()] == [
            "msg 2",
            "msg 3",
        ]


# ---------------------------------------------------------------------------
# Task prompts: tag parsing and the extract task
# ---------------------------------------------------------------------------


def test_task_tag_only_counts_at_start_of_first_system_message() -> None:
    tagged = {"messages": [{"role": "system", "content": "[memory-sidecar:extract v2] go"}]}
    tag = parse_task_tag(tagged)
    assert tag is not None
    assert (tag.task, tag.version) == ("extract", 2)
    assert format_task_tag("rewrite", 3) == "[memory-sidecar:rewrite v3]"

    late = {"messages": [{"role": "system", "content": "x [memory-sidecar:extract v1]"}]}
    second = {
        "messages": [
            {"role": "system", "content": "plain"},
            {"role": "system", "content": "[memory-sidecar:extract v1]"},
        ]
    }
    in_user = {"messages": [{"role": "user", "content": "[memory-sidecar:extract v1]"}]}
    empty: dict[str, Any] = {"messages": []}
    for body in (late, second, in_user, empty):
        assert parse_task_tag(body) is None


async def test_extract_task_returns_expected_facts(mock_llm: MockLLM, client: AsyncOpenAI) -> None:
    user = (
        "Hi! I live in Berlin. I'm allergic to peanuts.\n"
        "My sister's name is Ana. Can you recommend a restaurant near me? "
        "Please always answer in French. I live in Berlin."
    )
    assistant = "Sure! I am an AI and I live in the cloud. My favourite food is data."
    content = await ask(
        client, extract_messages(user, assistant), response_format={"type": "json_object"}
    )

    assert not content.startswith("```")
    assert json.loads(content) == {
        "facts": [
            {"text": "User lives in Berlin.", "type": "semantic", "importance": 0.5},
            {"text": "User is allergic to peanuts.", "type": "semantic", "importance": 0.5},
            {"text": "User's sister's name is Ana.", "type": "semantic", "importance": 0.5},
            {
                "text": "User wants the assistant to always answer in French.",
                "type": "constraint",
                "importance": 0.8,
            },
        ]
    }
    assert mock_llm.stats()["tasks"] == {"extract": 1}
    assert mock_llm.stats()["echo"] == 0


async def test_extract_task_with_no_facts(client: AsyncOpenAI) -> None:
    content = await ask(client, extract_messages("What's the weather in Rome? Thanks!"))
    assert json.loads(content) == {"facts": []}


@pytest.mark.parametrize(
    ("sentence", "fact"),
    [
        ("I live in Berlin", "User lives in Berlin."),
        ("I'm allergic to peanuts.", "User is allergic to peanuts."),
        ("My sister's name is Ana", "User's sister's name is Ana."),
        ("I have two cats", "User has two cats."),
        ("I moved to Lisbon last month", "User moved to Lisbon last month."),
        ("I work as a nurse", "User works as a nurse."),
        ("I don't eat meat", "User does not eat meat."),
        ("I do not eat meat", "User does not eat meat."),
        ("I love hiking!", "User loves hiking."),
        ("I've been learning Rust", "User has been learning Rust."),
        ("I can't swim", "User cannot swim."),
        ("I study physics", "User studies physics."),
        ("I watch anime", "User watches anime."),
        ("Last month I went to Paris", "Last month User went to Paris."),
        ("My wife and I have two kids", "User's wife and User have two kids."),
        ("I miss my family", "User misses User's family."),
    ],
)
def test_extract_rewrites_first_person_as_user_facts(sentence: str, fact: str) -> None:
    assert extract_facts(sentence) == [{"text": fact, "type": "semantic", "importance": 0.5}]


@pytest.mark.parametrize(
    ("sentence", "fact", "kind"),
    [
        ("I usually run before work", "User usually runs before work.", "procedural"),
        ("I always write tests first", "User always writes tests first.", "procedural"),
        (
            "Always answer in French",
            "User wants the assistant to always answer in French.",
            "constraint",
        ),
        (
            "Never use emojis with me",
            "User wants the assistant to never use emojis with User.",
            "constraint",
        ),
        (
            "Don't ever call me Bob",
            "User wants the assistant to never call User Bob.",
            "constraint",
        ),
        (
            "I want you to always answer briefly",
            "User wants the assistant to always answer briefly.",
            "constraint",
        ),
    ],
)
def test_extract_fact_types(sentence: str, fact: str, kind: str) -> None:
    importance = 0.8 if kind == "constraint" else 0.5
    assert extract_facts(sentence) == [{"text": fact, "type": kind, "importance": importance}]


@pytest.mark.parametrize(
    "sentence",
    [
        "Where do I live?",
        "Can you help me plan a trip",
        "Please help me with my essay",
        "Tell me about my options",
        "Hi!",
        "Hello there",
        "Thanks for helping me",
        "The weather is nice today",
        "Me too",
    ],
)
def test_extract_ignores_questions_greetings_and_requests(sentence: str) -> None:
    assert extract_facts(sentence) == []


def test_extract_uses_user_text_only_and_dedupes() -> None:
    text = turn("I live in Berlin.\nI live in Berlin! Also, I have two cats.", "I live in Rome.")
    user = parse_extract_turn(text)
    assert user == "I live in Berlin.\nI live in Berlin! Also, I have two cats."
    assert [f["text"] for f in extract_facts(user)] == [
        "User lives in Berlin.",
        "User has two cats.",
    ]
    assert parse_extract_turn("no markers here") is None


# ---------------------------------------------------------------------------
# Format knobs and faults
# ---------------------------------------------------------------------------


async def test_think_and_fence_knobs_wrap_task_json(
    mock_llm: MockLLM, client: AsyncOpenAI, http: aiohttp.ClientSession
) -> None:
    async with http.post(
        f"{mock_llm.url}/_mock/config", json={"think_tags": True, "json_fences": True}
    ) as resp:
        assert resp.status == 200
        assert (await resp.json())["think_tags"] is True

    content = await ask(client, extract_messages("I live in Berlin."))
    assert content.startswith("<think>")
    match = re.search(r"</think>\s*```json\n(?P<json>.*)\n```\s*\Z", content, re.S)
    assert match is not None
    assert json.loads(match["json"])["facts"][0]["text"] == "User lives in Berlin."

    # Echo answers are never decorated.
    echo = await ask(client, [{"role": "user", "content": "plain"}])
    assert echo == "ECHO\n[user] plain"

    mock_llm.configure(think_tags=False)
    fenced = await ask(client, extract_messages("I live in Berlin."))
    assert fenced.startswith("```json\n")
    assert fenced.endswith("\n```")


async def test_garbage_tasks_answer_non_json(mock_llm: MockLLM, client: AsyncOpenAI) -> None:
    mock_llm.configure(garbage_tasks=True)
    content = await ask(client, extract_messages("I live in Berlin."))
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)


async def test_error_rate_returns_configured_status(mock_llm: MockLLM, client: AsyncOpenAI) -> None:
    mock_llm.configure(error_rate=1.0, error_status=503)
    with pytest.raises(openai.APIStatusError) as excinfo:
        await ask(client, [{"role": "user", "content": "hello"}])
    assert excinfo.value.status_code == 503
    with pytest.raises(openai.APIStatusError):
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello"}], stream=True
        )
    stats = mock_llm.stats()
    assert stats["errors"] == 2
    assert stats["chat"] == 2

    mock_llm.configure(error_rate=0.0)
    assert await ask(client, [{"role": "user", "content": "hello"}]) == "ECHO\n[user] hello"
    assert mock_llm.stats()["errors"] == 2
    assert mock_llm.stats()["chat"] == 3


async def test_fail_tasks_only_fails_task_prompts(mock_llm: MockLLM, client: AsyncOpenAI) -> None:
    mock_llm.configure(fail_tasks=True, error_status=429)
    with pytest.raises(openai.RateLimitError):
        await ask(client, extract_messages("I live in Berlin."))
    assert await ask(client, [{"role": "user", "content": "ok"}]) == "ECHO\n[user] ok"
    assert mock_llm.stats() == {
        "chat": 2,
        "echo": 1,
        "stream": 0,
        "tasks": {"extract": 1},
        "errors": 1,
    }


async def test_error_rate_is_deterministic_for_a_seed(http: aiohttp.ClientSession) -> None:
    async def pattern(seed: int) -> list[int]:
        async with await start_mock(error_rate=0.5, seed=seed) as mock_llm:
            statuses = []
            for _ in range(24):
                body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
                async with http.post(f"{mock_llm.base_url}/chat/completions", json=body) as resp:
                    statuses.append(resp.status)
            assert mock_llm.stats()["errors"] == statuses.count(500)
            return statuses

    first = await pattern(7)
    assert first == await pattern(7)
    assert {200, 500} == set(first)


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
        await start_mock(task_handlers={"rewrite": rewrite}) as mock_llm,
        AsyncOpenAI(base_url=mock_llm.base_url, api_key="x", max_retries=0) as client,
    ):
        content = await ask(
            client,
            [
                {"role": "system", "content": f"{format_task_tag('rewrite')} Rewrite."},
                {"role": "user", "content": "where do i live"},
            ],
        )
        assert json.loads(content) == {"query": "WHERE DO I LIVE"}
        assert mock_llm.stats()["tasks"] == {"rewrite": 1}


# ---------------------------------------------------------------------------
# Latency
# ---------------------------------------------------------------------------


async def test_latency_delays_every_chat_request(mock_llm: MockLLM, client: AsyncOpenAI) -> None:
    mock_llm.configure(latency_ms=150)
    started = time.perf_counter()
    await ask(client, [{"role": "user", "content": "slow"}])
    assert time.perf_counter() - started >= 0.150


async def test_task_latency_delays_task_prompts(mock_llm: MockLLM, client: AsyncOpenAI) -> None:
    mock_llm.configure(task_latency_ms=150)
    started = time.perf_counter()
    await ask(client, extract_messages("I live in Berlin."))
    assert time.perf_counter() - started >= 0.150


async def test_stream_chunk_delay(mock_llm: MockLLM, client: AsyncOpenAI) -> None:
    mock_llm.configure(stream_chunk_delay_ms=30, stream_chunks=3)
    started = time.perf_counter()
    stream = await client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "a b c d e f"}],
        stream=True,
    )
    chunks = [chunk async for chunk in stream]
    elapsed = time.perf_counter() - started
    assert len(chunks) == 5  # role, 3 content pieces, finish
    assert elapsed >= 0.030 * (len(chunks) - 1)


# ---------------------------------------------------------------------------
# Runtime config, stats, reset
# ---------------------------------------------------------------------------


async def test_runtime_config_validation_and_reset(
    mock_llm: MockLLM, client: AsyncOpenAI, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{mock_llm.url}/_mock/config") as resp:
        assert await resp.json() == MockConfig().to_dict()

    for bad in ({"no_such_knob": 1}, {"error_rate": 2}, {"fail_tasks": "yes"}, [1, 2]):
        async with http.post(f"{mock_llm.url}/_mock/config", json=bad) as resp:
            assert resp.status == 400, bad
            assert "error" in await resp.json()

    async with http.post(f"{mock_llm.url}/_mock/config", json={"latency_ms": 5}) as resp:
        assert resp.status == 200
    assert mock_llm.config.latency_ms == 5.0

    await ask(client, [{"role": "user", "content": "x"}])
    async with http.get(f"{mock_llm.url}/_mock/stats") as resp:
        assert (await resp.json())["chat"] == 1

    async with http.post(f"{mock_llm.url}/_mock/reset") as resp:
        assert resp.status == 200
    assert mock_llm.config == MockConfig()
    assert mock_llm.requests() == []
    assert mock_llm.stats()["chat"] == 0


async def test_start_mock_rejects_bad_config() -> None:
    with pytest.raises(ValueError, match="error_rate"):
        await start_mock(error_rate=1.5)
    with pytest.raises(ValueError, match="unknown config key"):
        await start_mock(latency=1)


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


async def test_cli_prints_port_serves_health_and_exits_on_sigterm(
    http: aiohttp.ClientSession,
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "e2e.mock_llm",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--latency-ms",
        "1",
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=10)
        match = re.fullmatch(rb"MOCK_LLM_PORT=(\d+)\n", line)
        assert match is not None, line
        port = int(match[1])
        assert port > 0

        async with http.get(f"http://127.0.0.1:{port}/health") as resp:
            assert resp.status == 200
        async with http.get(f"http://127.0.0.1:{port}/_mock/config") as resp:
            assert (await resp.json())["latency_ms"] == 1.0

        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=10)
        assert proc.returncode == 0, stderr.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.communicate()
