"""The OpenAI Responses API through the real Envoy binary: the OpenAI SDK's
``client.responses.create`` -> Envoy -> sidecar -> mock LLM, streamed and not.

A fact told in chat is injected into a Responses call (its own input item right
before the latest user item; ``instructions`` byte for byte as sent), and what a
Responses call says is written as a turn that chat then finds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.stack import Stack, running_stack
from tests.e2e.test_envoy_flow import client, new_user, wait_written, written

pytestmark = pytest.mark.e2e

INSTRUCTIONS = "You are terse.  Answer in one line."


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("e2e-responses")) as running:
        yield running


def settled(stack: Stack, quiet_s: float = 1.0, timeout: float = 30) -> float:
    """The written-turn count once it has not moved for ``quiet_s`` (other tests'
    turns may still be on their way)."""
    deadline = time.monotonic() + timeout
    count = written(stack)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = written(stack)
        if now == count:
            return now
        count = now
    raise AssertionError("turns kept being written")


def tell_in_chat(stack: Stack, user: str, text: str) -> None:
    before = written(stack)
    client(stack, user).chat.completions.create(
        model="mock-llm", messages=[{"role": "user", "content": text}]
    )
    wait_written(stack, before + 1)


def last_upstream_responses_body(stack: Stack) -> dict[str, Any]:
    bodies = [
        r["body"]
        for r in stack.mock_requests()
        if r["path"] == "/v1/responses" and "x-user-id" in r["headers"]
    ]
    assert bodies, "no Responses request reached the upstream"
    body: dict[str, Any] = bodies[-1]
    return body


def test_a_fact_told_in_chat_is_injected_into_a_responses_call(stack: Stack) -> None:
    ana = new_user("ana")
    tell_in_chat(stack, ana, "I live in Bergen and I'm allergic to kiwi.")

    raw = client(stack, ana).responses.with_raw_response.create(
        model="mock-llm", instructions=INSTRUCTIONS, input="Where do I live?"
    )
    assert int(raw.headers["x-memory-injected"]) >= 1
    echo = raw.parse().output_text
    assert "User lives in Bergen" in echo
    body = last_upstream_responses_body(stack)
    assert body["instructions"] == INSTRUCTIONS  # never rewritten: the prefix holds
    block, question = body["input"][-2:]
    assert block["role"] == "system"
    assert "User lives in Bergen" in block["content"]
    assert question == {"role": "user", "content": "Where do I live?"}

    # Another user's Responses call sees none of it.
    other = client(stack, new_user("bo")).responses.with_raw_response.create(
        model="mock-llm", input="Where do I live?"
    )
    assert other.headers["x-memory-injected"] == "0"
    assert "Bergen" not in other.parse().output_text


def test_a_streamed_responses_call_is_injected_too(stack: Stack) -> None:
    cleo = new_user("cleo")
    tell_in_chat(stack, cleo, "I work as a nurse in Tromso.")
    items: Any = [
        {"role": "user", "content": [{"type": "input_text", "text": "Hello!"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hi, how can I help?"}],
        },
        {"role": "user", "content": [{"type": "input_text", "text": "What is my job?"}]},
    ]
    stream = client(stack, cleo).responses.create(model="mock-llm", input=items, stream=True)
    assert int(stream.response.headers["x-memory-injected"]) >= 1
    deltas: list[str] = []
    completed = None
    for event in stream:
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type == "response.completed":
            completed = event.response
    assert completed is not None
    assert completed.output_text == "".join(deltas)
    assert "User works as a nurse" in completed.output_text
    body = last_upstream_responses_body(stack)
    assert body["input"][:2] == items[:2]  # the conversation before it, as sent
    assert body["input"][2]["role"] == "system"
    assert body["input"][3] == items[2]


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
def test_what_a_responses_call_says_is_remembered(stack: Stack, streamed: bool) -> None:
    dan = new_user("dan")
    before = written(stack)
    answer = client(stack, dan).responses.create(
        model="mock-llm", input="My daughter is called Ingrid.", stream=streamed
    )
    if streamed:
        assert any(event.type == "response.completed" for event in answer)  # type: ignore[union-attr]
    wait_written(stack, before + 1)

    raw = client(stack, dan).chat.completions.with_raw_response.create(
        model="mock-llm", messages=[{"role": "user", "content": "What is my daughter's name?"}]
    )
    assert int(raw.headers["x-memory-injected"]) >= 1
    assert "Ingrid" in (raw.parse().choices[0].message.content or "")


def test_a_read_only_route_injects_into_responses_and_stores_nothing(stack: Stack) -> None:
    eva = new_user("eva")
    tell_in_chat(stack, eva, "I am vegetarian.")
    before = settled(stack)
    raw = client(stack, eva, "/readonly/v1").responses.with_raw_response.create(
        model="mock-llm", input="I also keep two cats. What should I cook tonight?"
    )
    assert int(raw.headers["x-memory-injected"]) >= 1
    assert "vegetarian" in raw.parse().output_text
    assert settled(stack) == before
