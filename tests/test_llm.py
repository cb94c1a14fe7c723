"""Tests for the LLM wrapper (sidecar.llm) against the project's mock LLM server."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from e2e.mock_llm import MockLLM
from e2e.mock_protocol import format_task_tag
from sidecar.config import LLMConfig
from sidecar.errors import LLMBadOutput, LLMError, LLMTimeout, LLMUnavailable
from sidecar.llm import (
    ChatMessage,
    LLMClient,
    parse_json_loose,
    refused,
    strip_reasoning,
    task_tag,
)
from sidecar.metrics import Metrics

CALLS = "memory_sidecar_llm_calls_total"


# -- pure helpers -------------------------------------------------------------------------


def test_task_tag_matches_the_mock_protocol() -> None:
    assert task_tag("extract", 1) == "[memory-sidecar:extract v1]"
    assert task_tag("rewrite", 12) == format_task_tag("rewrite", 12)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>plan</think>answer", "answer"),
        ("<think>\nmulti\nline\n</think>\n  answer  ", "answer"),
        ("<THINK>x</THINK>answer", "answer"),
        ("<thinking>x</thinking>answer", "answer"),
        ("before <think>x</think> after", "before  after"),
        ("<think>a</think>one<think>b</think>two", "onetwo"),
        ('<think>never closed {"a": 1}', ""),
        ("answer <think>trailing, unterminated", "answer"),
        ("no tags", "no tags"),
    ],
)
def test_strip_reasoning(text: str, expected: str) -> None:
    assert strip_reasoning(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"facts": []}', {"facts": []}),
        ('  {"a": 1}  ', {"a": 1}),
        ("[1, 2, 3]", [1, 2, 3]),
        ('[{"text": "x"}]', [{"text": "x"}]),
        ('<think>{"draft": true}</think>{"a": 1}', {"a": 1}),
        ('<think>\nhmm { not json\n</think>\n{"a": 2}', {"a": 2}),
        ('```json\n{"a": 3}\n```', {"a": 3}),
        ('```JSON\n{"a": 3}\n```', {"a": 3}),
        ('```\n{"a": 4}\n```', {"a": 4}),
        ('Here you go:\n```json\n{"a": 5}\n```\nHope that helps!', {"a": 5}),
        ('<think>x</think>\n```json\n{"a": 6}\n```', {"a": 6}),
        ('Sure! {"a": 7} Let me know.', {"a": 7}),
        ('Sure: {oops} then {"a": 8}', {"a": 8}),
        ('{"a": {"b": [1, {"c": "}"}]}} trailing', {"a": {"b": [1, {"c": "}"}]}}),
        ('{"first": 1} {"second": 2}', {"first": 1}),
        ('```json\n{"broken": \n```\n{"a": 9}', {"a": 9}),
        ('{"text": "Grüße 😀"}', {"text": "Grüße 😀"}),
        # What small instruction-tuned models produce at the end of their budget.
        ('{"facts": [{"text": "User has a dog"},]}', {"facts": [{"text": "User has a dog"}]}),
        ('{"a": 1, "b": [1, 2,],\n}', {"a": 1, "b": [1, 2]}),
        (
            '{"facts": [{"text": "User lives in Oslo"}, {"text": "User wor',
            {"facts": [{"text": "User lives in Oslo"}]},
        ),
        (
            '<think>two facts</think>```json\n{"facts": [{"text": "A"}, {"text": "B"}, {"te',
            {"facts": [{"text": "A"}, {"text": "B"}]},
        ),
        ('[{"text": "x, ]"}, {"text": "y"', [{"text": "x, ]"}]),
        ('{"text": "comma, } inside"}', {"text": "comma, } inside"}),
        ('Answer: {"facts": [], "note": "none",}', {"facts": [], "note": "none"}),
    ],
)
def test_parse_json_loose(text: str, expected: object) -> None:
    assert parse_json_loose(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "no json here",
        "42",
        '"just a string"',
        "{not: json}",
        "[unclosed",
        '<think>{"a": 1}</think>',
        '<think>{"a": 1}',  # unterminated think hides everything after it
        "```json\n{oops\n```",
        "Sure! Here are the results you asked for: {facts: [oops, this is not JSON",
        "[" * 5_000,  # nested past the parser's recursion limit, never closed
        '{"facts": [{"text": "cut before any element closed',
    ],
)
def test_parse_json_loose_without_json_raises_bad_output(text: str) -> None:
    with pytest.raises(LLMBadOutput):
        parse_json_loose(text)


def test_llm_bad_output_is_an_llm_error() -> None:
    assert issubclass(LLMBadOutput, LLMError)
    assert issubclass(LLMTimeout, LLMError)
    assert issubclass(LLMUnavailable, LLMError)


# -- the client -------------------------------------------------------------------------------

SYSTEM: ChatMessage = {"role": "system", "content": task_tag("extract", 1) + " Extract facts."}
USER: ChatMessage = {
    "role": "user",
    "content": "Turn time: 2026-11-22T10:00:00Z\nUser: I live in Berlin.\nAssistant: Nice.",
}
TASK_MESSAGES: list[ChatMessage] = [SYSTEM, USER]


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


TRANSPORTS = pytest.mark.parametrize("transport", ["aiohttp", "httpx"])


@pytest.fixture(params=["aiohttp", "httpx"])
async def llm(
    mock_llm: MockLLM, metrics: Metrics, request: pytest.FixtureRequest
) -> AsyncIterator[LLMClient]:
    """A client on each of the OpenAI client's transports: the outcomes are the same."""
    config = LLMConfig(
        base_url=mock_llm.base_url,
        api_key="sk-test",
        model="m1",
        timeout_s=5,
        transport=request.param,
    )
    client = LLMClient(config, metrics)
    try:
        yield client
    finally:
        await client.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_unconfigured_client_raises_unavailable_without_calling(metrics: Metrics) -> None:
    client = LLMClient(LLMConfig(), metrics)
    assert client.configured is False
    with pytest.raises(LLMUnavailable, match="no LLM is configured"):
        await client.chat("extract", TASK_MESSAGES)
    with pytest.raises(LLMUnavailable):
        await client.chat_json("extract", TASK_MESSAGES)
    assert metrics.value(CALLS, {"task": "extract", "outcome": "ok"}) == 0
    await client.close()  # a no-op


async def test_chat_returns_the_answer_and_counts_it(
    llm: LLMClient, mock_llm: MockLLM, metrics: Metrics
) -> None:
    assert llm.configured
    answer = await llm.chat("echo", [{"role": "user", "content": "hello"}])
    assert answer == "ECHO\n[user] hello"
    assert metrics.value(CALLS, {"task": "echo", "outcome": "ok"}) == 1
    assert metrics.value("memory_sidecar_llm_seconds_count", {"task": "echo"}) == 1


async def test_chat_sends_the_configured_model_key_and_limits(
    llm: LLMClient, mock_llm: MockLLM
) -> None:
    await llm.chat("echo", [{"role": "user", "content": "hi"}], max_tokens=77, temperature=0.7)
    (recorded,) = mock_llm.requests()
    assert recorded["headers"]["authorization"] == "Bearer sk-test"
    body = recorded["body"]
    assert body["model"] == "m1"
    assert body["max_tokens"] == 77
    assert body["temperature"] == 0.7
    assert "response_format" not in body
    assert body["messages"] == [{"role": "user", "content": "hi"}]


async def test_chat_uses_config_defaults_for_limits(llm: LLMClient, mock_llm: MockLLM) -> None:
    await llm.chat("echo", [{"role": "user", "content": "hi"}])
    body = mock_llm.requests()[0]["body"]
    assert body["max_tokens"] == 512
    assert body["temperature"] == 0.0


async def test_chat_json_asks_for_json_and_parses(
    llm: LLMClient, mock_llm: MockLLM, metrics: Metrics
) -> None:
    value = await llm.chat_json("extract", TASK_MESSAGES)
    assert value == {
        "facts": [{"text": "User lives in Berlin.", "type": "semantic", "importance": 0.5}]
    }
    assert mock_llm.requests()[0]["body"]["response_format"] == {"type": "json_object"}
    assert metrics.value(CALLS, {"task": "extract", "outcome": "ok"}) == 1


@pytest.mark.parametrize(
    "knobs",
    [{"think_tags": True}, {"json_fences": True}, {"think_tags": True, "json_fences": True}],
)
async def test_chat_json_tolerates_think_tags_and_fences(
    llm: LLMClient, mock_llm: MockLLM, knobs: dict[str, bool]
) -> None:
    mock_llm.configure(**knobs)
    value = await llm.chat_json("extract", TASK_MESSAGES)
    assert value["facts"][0]["text"] == "User lives in Berlin."


async def test_chat_strips_think_tags(llm: LLMClient, mock_llm: MockLLM) -> None:
    mock_llm.configure(think_tags=True)
    answer = await llm.chat("extract", TASK_MESSAGES)
    assert "<think>" not in answer
    assert answer.startswith("{")


@pytest.mark.parametrize("status", [500, 503, 429, 400])
async def test_http_errors_raise_unavailable(
    llm: LLMClient, mock_llm: MockLLM, metrics: Metrics, status: int
) -> None:
    mock_llm.configure(fail_tasks=True, error_status=status)
    with pytest.raises(LLMUnavailable, match=f"HTTP {status}"):
        await llm.chat_json("extract", TASK_MESSAGES)
    assert metrics.value(CALLS, {"task": "extract", "outcome": "http_error"}) == 1
    assert metrics.value(CALLS, {"task": "extract", "outcome": "ok"}) == 0
    assert len(mock_llm.requests()) == 1  # max_retries=0: no hidden retries


async def test_garbage_answer_raises_bad_output(
    llm: LLMClient, mock_llm: MockLLM, metrics: Metrics
) -> None:
    mock_llm.configure(garbage_tasks=True)
    with pytest.raises(LLMBadOutput):
        await llm.chat_json("extract", TASK_MESSAGES)
    assert metrics.value(CALLS, {"task": "extract", "outcome": "bad_output"}) == 1


@TRANSPORTS
async def test_slow_answer_raises_timeout(
    mock_llm: MockLLM, metrics: Metrics, transport: str
) -> None:
    mock_llm.configure(task_latency_ms=600)
    config = LLMConfig(base_url=mock_llm.base_url, timeout_s=0.1, transport=transport)
    client = LLMClient(config, metrics)
    try:
        with pytest.raises(LLMTimeout, match=r"no answer within 0\.1s"):
            await client.chat_json("extract", TASK_MESSAGES)
    finally:
        await client.close()
    assert metrics.value(CALLS, {"task": "extract", "outcome": "timeout"}) == 1
    assert metrics.value(CALLS, {"task": "extract", "outcome": "ok"}) == 0


async def test_per_call_timeout_overrides_the_config(
    llm: LLMClient, mock_llm: MockLLM, metrics: Metrics
) -> None:
    mock_llm.configure(task_latency_ms=600)
    with pytest.raises(LLMTimeout):
        await llm.chat("extract", TASK_MESSAGES, timeout_s=0.1)
    assert metrics.value(CALLS, {"task": "extract", "outcome": "timeout"}) == 1


@TRANSPORTS
async def test_connection_refused_raises_unavailable(metrics: Metrics, transport: str) -> None:
    """Not a timeout, though the aiohttp transport raises a connect timeout for it."""
    config = LLMConfig(base_url=f"http://127.0.0.1:{free_port()}/v1", transport=transport)
    client = LLMClient(config, metrics)
    try:
        with pytest.raises(LLMUnavailable):
            await client.chat("extract", TASK_MESSAGES)
    finally:
        await client.close()
    assert metrics.value(CALLS, {"task": "extract", "outcome": "unavailable"}) == 1


@pytest.mark.parametrize(
    ("body", "outcome"),
    [
        (b"<html>gateway error</html>", "bad_output"),  # not JSON
        (b"\xff\xfe", "bad_output"),  # not UTF-8
        (b'{"error": {"message": "overloaded"}}', "bad_output"),  # not a completion
        (b'["choices"]', "bad_output"),
        (b"[" * 5_000 + b"]" * 5_000, "bad_output"),  # nested too deep to parse
        (b'{"choices": []}', "empty"),
        (b'{"choices": [{"message": {"content": null}}]}', "empty"),
        (b'{"choices": [{"message": {"content": "  "}}]}', "empty"),
        (b'{"choices": ["odd"]}', "empty"),
    ],
)
async def test_a_response_that_is_no_chat_completion_is_bad_output(
    metrics: Metrics, body: bytes, outcome: str
) -> None:
    """A 200 whose body is not a usable chat completion (a proxy's error page, a
    truncated answer) is an LLM failure the caller falls back from, and counted."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}"
        writer.write(head.encode() + b"\r\nconnection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = LLMClient(LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", timeout_s=5), metrics)
    try:
        with pytest.raises(LLMBadOutput):
            await client.chat_json("extract", TASK_MESSAGES)
        assert metrics.value(CALLS, {"task": "extract", "outcome": outcome}) == 1
    finally:
        await client.close()
        server.close()
        await server.wait_closed()


def test_refused_follows_the_exception_chain() -> None:
    outer = TimeoutError("connect timeout")
    outer.__cause__ = OSError("connect failed")
    outer.__cause__.__cause__ = ConnectionRefusedError(111, "refused")
    assert refused(outer)
    assert not refused(TimeoutError("read timeout"))
    looped = TimeoutError("a chain that points back at itself")
    looped.__context__ = OSError("middle")
    looped.__context__.__context__ = looped
    assert not refused(looped)


async def test_the_tokens_the_server_reports_are_counted(
    llm: LLMClient, mock_llm: MockLLM, metrics: Metrics
) -> None:
    await llm.chat("echo", [{"role": "user", "content": "hi there"}])
    prompt = metrics.value("memory_sidecar_llm_tokens_total", {"task": "echo", "kind": "prompt"})
    answer = metrics.value(
        "memory_sidecar_llm_tokens_total", {"task": "echo", "kind": "completion"}
    )
    assert prompt > 0
    assert answer > 0
    assert metrics.llm_token_total() == prompt + answer


def test_usage_is_read_where_the_server_gives_it() -> None:
    from sidecar.llm import token_usage

    assert token_usage({"usage": {"prompt_tokens": 12, "completion_tokens": 3}}) == (12, 3)
    assert token_usage({"usage": {"prompt_tokens": "x"}}) == (0, 0)
    assert token_usage({}) == (0, 0)
