"""The mock LLM's knobs (``e2e/mock_config.py``) as the service applies them: answer
formats, injected faults, latency, and changing, validating and resetting them at
run time.
"""

from __future__ import annotations

import json
import re
import time

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI

from e2e.mock_config import MockConfig
from e2e.mock_llm import MockLLM, start_mock
from tests.e2e_support.mock_llm_support import ask, extract_messages

# ---------------------------------------------------------------------------
# Format knobs and faults
# ---------------------------------------------------------------------------


async def test_think_and_fence_knobs_wrap_task_json(
    mock: MockLLM, client: AsyncOpenAI, http: aiohttp.ClientSession
) -> None:
    async with http.post(
        f"{mock.url}/_mock/config", json={"think_tags": True, "json_fences": True}
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

    mock.configure(think_tags=False)
    fenced = await ask(client, extract_messages("I live in Berlin."))
    assert fenced.startswith("```json\n")
    assert fenced.endswith("\n```")


async def test_garbage_tasks_answer_non_json(mock: MockLLM, client: AsyncOpenAI) -> None:
    mock.configure(garbage_tasks=True)
    content = await ask(client, extract_messages("I live in Berlin."))
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)


async def test_error_rate_returns_configured_status(mock: MockLLM, client: AsyncOpenAI) -> None:
    mock.configure(error_rate=1.0, error_status=503)
    with pytest.raises(openai.APIStatusError) as excinfo:
        await ask(client, [{"role": "user", "content": "hello"}])
    assert excinfo.value.status_code == 503
    with pytest.raises(openai.APIStatusError):
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello"}], stream=True
        )
    stats = mock.stats()
    assert stats["errors"] == 2
    assert stats["chat"] == 2

    mock.configure(error_rate=0.0)
    assert await ask(client, [{"role": "user", "content": "hello"}]) == "ECHO\n[user] hello"
    assert mock.stats()["errors"] == 2
    assert mock.stats()["chat"] == 3


async def test_fail_tasks_only_fails_task_prompts(mock: MockLLM, client: AsyncOpenAI) -> None:
    mock.configure(fail_tasks=True, error_status=429)
    with pytest.raises(openai.RateLimitError):
        await ask(client, extract_messages("I live in Berlin."))
    assert await ask(client, [{"role": "user", "content": "ok"}]) == "ECHO\n[user] ok"
    assert mock.stats() == {
        "chat": 2,
        "responses": 0,
        "echo": 1,
        "stream": 0,
        "tasks": {"extract": 1},
        "errors": 1,
    }


async def test_error_rate_is_deterministic_for_a_seed(http: aiohttp.ClientSession) -> None:
    async def pattern(seed: int) -> list[int]:
        async with await start_mock(error_rate=0.5, seed=seed) as mock:
            statuses = []
            for _ in range(24):
                body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
                async with http.post(f"{mock.base_url}/chat/completions", json=body) as resp:
                    statuses.append(resp.status)
            assert mock.stats()["errors"] == statuses.count(500)
            return statuses

    first = await pattern(7)
    assert first == await pattern(7)
    assert {200, 500} == set(first)


# ---------------------------------------------------------------------------
# Latency
# ---------------------------------------------------------------------------


async def test_latency_delays_every_chat_request(mock: MockLLM, client: AsyncOpenAI) -> None:
    mock.configure(latency_ms=150)
    started = time.perf_counter()
    await ask(client, [{"role": "user", "content": "slow"}])
    assert time.perf_counter() - started >= 0.150


async def test_task_latency_delays_task_prompts(mock: MockLLM, client: AsyncOpenAI) -> None:
    mock.configure(task_latency_ms=150)
    started = time.perf_counter()
    await ask(client, extract_messages("I live in Berlin."))
    assert time.perf_counter() - started >= 0.150


async def test_stream_chunk_delay(mock: MockLLM, client: AsyncOpenAI) -> None:
    mock.configure(stream_chunk_delay_ms=30, stream_chunks=3)
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
    mock: MockLLM, client: AsyncOpenAI, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{mock.url}/_mock/config") as resp:
        assert await resp.json() == MockConfig().to_dict()

    for bad in ({"no_such_knob": 1}, {"error_rate": 2}, {"fail_tasks": "yes"}, [1, 2]):
        async with http.post(f"{mock.url}/_mock/config", json=bad) as resp:
            assert resp.status == 400, bad
            assert "error" in await resp.json()

    async with http.post(f"{mock.url}/_mock/config", json={"latency_ms": 5}) as resp:
        assert resp.status == 200
    assert mock.config.latency_ms == 5.0

    await ask(client, [{"role": "user", "content": "x"}])
    async with http.get(f"{mock.url}/_mock/stats") as resp:
        assert (await resp.json())["chat"] == 1

    async with http.post(f"{mock.url}/_mock/reset") as resp:
        assert resp.status == 200
    assert mock.config == MockConfig()
    assert mock.requests() == []
    assert mock.stats()["chat"] == 0


async def test_start_mock_rejects_bad_config() -> None:
    with pytest.raises(ValueError, match="error_rate"):
        await start_mock(error_rate=1.5)
    with pytest.raises(ValueError, match="unknown config key"):
        await start_mock(latency=1)
