"""Through the real Envoy binary: OpenAI SDK -> Envoy -> sidecar -> mock LLM.

One stack (mock LLM, sidecar process, Envoy) per module. Each test uses its own
user ids so the tests do not depend on one another's memories.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from e2e.stack import Stack, running_stack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("e2e")) as running:
        yield running


def client(stack: Stack, user: str, prefix: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=stack.route_url(prefix),
        api_key="unused",
        default_headers={"x-user-id": user},
        max_retries=0,
        timeout=30,
    )


def new_user(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


def wait_written(stack: Stack, at_least: float, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "written"}) >= at_least:
            return
        time.sleep(0.1)
    raise AssertionError("the sidecar did not write the turn in time")


def written(stack: Stack) -> float:
    return stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "written"})


def say(stack: Stack, user: str, text: str, prefix: str = "/v1") -> str:
    """One non-streaming turn; returns the echoed answer."""
    answer = client(stack, user, prefix).chat.completions.create(
        model="mock-llm", messages=[{"role": "user", "content": text}]
    )
    return answer.choices[0].message.content or ""


def upstream_requests(stack: Stack) -> list[dict[str, Any]]:
    """Requests that came through Envoy (not the sidecar's own tagged LLM calls)."""
    return [r for r in stack.mock_requests() if "x-user-id" in r["headers"]]


def system_prompt_seen_upstream(echo: str) -> str:
    """The system message(s) the upstream received, from the mock's echo."""
    start = echo.find("[system] ")
    if start < 0:
        return ""
    end = echo.find("\n[user] ", start)
    return echo[start : end if end >= 0 else len(echo)]


def test_memory_reaches_the_next_conversation_for_that_user_only(stack: Stack) -> None:
    alice, bob = new_user("alice"), new_user("bob")
    before = written(stack)
    say(stack, alice, "Hi! I live in Berlin and I'm allergic to peanuts.")
    wait_written(stack, before + 1)

    raw = client(stack, alice).chat.completions.with_raw_response.create(
        model="mock-llm", messages=[{"role": "user", "content": "Where do I live?"}]
    )
    echo = raw.parse().choices[0].message.content or ""
    assert "User lives in Berlin" in system_prompt_seen_upstream(echo)
    assert int(raw.headers["x-memory-injected"]) >= 1

    other = client(stack, bob).chat.completions.with_raw_response.create(
        model="mock-llm", messages=[{"role": "user", "content": "Where do I live?"}]
    )
    other_echo = other.parse().choices[0].message.content or ""
    assert "Berlin" not in other_echo
    assert other.headers["x-memory-injected"] == "0"


def test_a_tool_loop_gets_its_memories_on_every_round_trip(stack: Stack) -> None:
    """Every round trip of an agent's tool loop resends the same latest user message:
    memories are injected each time, the message is embedded once and ranked anew
    only when the scope's memories changed."""
    erin = new_user("erin")
    before = written(stack)
    say(stack, erin, "I live in Lisbon.")
    wait_written(stack, before + 1)
    hit = {"outcome": "hit"}
    hits = stack.sidecar_metric("memory_sidecar_query_vector_cache_lookups_total", hit)
    embedded = stack.sidecar_metric("memory_sidecar_embed_seconds_count")
    ranked = "memory_sidecar_ranking_cache_lookups_total"
    reused = stack.sidecar_metric(ranked, hit)
    tool: Any = {
        "type": "function",
        "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
    }
    messages: list[Any] = [{"role": "user", "content": "Where do I live?"}]
    for round_trip in range(3):
        raw = client(stack, erin).chat.completions.with_raw_response.create(
            model="mock-llm", messages=messages, tools=[tool]
        )
        echo = raw.parse().choices[0].message.content or ""
        assert "User lives in Lisbon" in system_prompt_seen_upstream(echo), round_trip
        call: dict[str, Any] = {"id": f"call_{round_trip}", "type": "function"}
        call["function"] = {"name": "lookup", "arguments": "{}"}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "nothing new"},
        ]
    assert stack.sidecar_metric("memory_sidecar_embed_seconds_count") == embedded + 1
    after = stack.sidecar_metric("memory_sidecar_query_vector_cache_lookups_total", hit)
    assert after == hits + 2
    # Rankings too, while the scope's snapshot stays the same (a periodic flush of
    # access counts makes a new one, so one of the two may rank again).
    assert stack.sidecar_metric(ranked, hit) >= reused + 1


def test_streaming_injects_and_remembers(stack: Stack) -> None:
    carol = new_user("carol")
    before = written(stack)
    stream = client(stack, carol).chat.completions.create(
        model="mock-llm",
        messages=[{"role": "user", "content": "My sister's name is Ana."}],
        stream=True,
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert len(pieces) > 1
    assert "My sister's name is Ana." in "".join(pieces)
    wait_written(stack, before + 1)

    with client(stack, carol).chat.completions.with_streaming_response.create(
        model="mock-llm",
        messages=[{"role": "user", "content": "What is my sister called?"}],
        stream=True,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert int(response.headers["x-memory-injected"]) >= 1
        text = "".join(
            chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices
        )
    assert "User's sister's name is Ana." in system_prompt_seen_upstream(text)


def test_readonly_route_injects_but_never_stores(stack: Stack) -> None:
    dave = new_user("dave")
    before = written(stack)
    say(stack, dave, "I work as a nurse.")
    wait_written(stack, before + 1)

    accepted = stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "accepted"})
    echo = say(stack, dave, "I have a dog named Rex. What is my job?", prefix="/readonly/v1")
    assert "User works as a nurse" in system_prompt_seen_upstream(echo)
    time.sleep(0.5)
    assert stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "accepted"}) == accepted

    echo = say(stack, dave, "What is my dog's name?")
    assert "Rex" not in system_prompt_seen_upstream(echo)


def test_disabled_route_is_byte_identical(stack: Stack, tmp_path: Path) -> None:
    body = b'{"model":"mock-llm",  "messages":[{"role":"user","content":"I live in Rome."}]}'
    request = urllib.request.Request(
        stack.route_url("/nomemory/v1/chat/completions"),
        data=body,
        headers={"content-type": "application/json", "x-user-id": new_user("erin")},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        assert response.headers.get("x-memory-injected") is None
        json.loads(response.read())
    seen = upstream_requests(stack)[-1]
    assert seen["path"] == "/v1/chat/completions"
    assert base64.b64decode(seen["raw_body_b64"]) == body


def test_memory_route_rewrites_body_with_matching_length(stack: Stack) -> None:
    frank = new_user("frank")
    before = written(stack)
    say(stack, frank, "I have two cats.")
    wait_written(stack, before + 1)
    say(stack, frank, "How many cats do I have?")
    seen = upstream_requests(stack)[-1]
    raw = base64.b64decode(seen["raw_body_b64"])
    assert int(seen["headers"]["content-length"]) == len(raw)
    assert "User has two cats" in json.loads(raw)["messages"][0]["content"]


def set_mock(stack: Stack, **config: Any) -> None:
    request = urllib.request.Request(
        f"{stack.mock_url}/_mock/config",
        data=json.dumps(config).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_sigterm_drains_queued_turns(stack: Stack) -> None:
    """Turns still being extracted when SIGTERM arrives are written before exit."""
    user = new_user("hana")
    set_mock(stack, task_latency_ms=700)
    try:
        for fact in ("I play the violin.", "I grow tomatoes.", "I speak Basque."):
            say(stack, user, fact)
        assert stack.sidecar.stop(timeout=60) == 0
    finally:
        set_mock(stack, task_latency_ms=0)
        stack.restart_sidecar()
    echo = say(stack, user, "What do I play, grow and speak?")
    block = system_prompt_seen_upstream(echo)
    for fact in ("violin", "tomatoes", "Basque"):
        assert fact in block


def test_sidecar_down_fails_open(stack: Stack) -> None:
    """Last in the module: stops the sidecar, then brings it back."""
    stack.sidecar.stop()
    try:
        echo = say(stack, new_user("gina"), "I live in Madrid. Where do I live?")
        assert echo.startswith("ECHO")
    finally:
        stack.restart_sidecar()


def injected_after(stack: Stack, user: str, said: list[str], question: str) -> str:
    """Say each of ``said`` as its own turn, wait for the writes, then ask ``question``
    and return the system prompt the upstream saw."""
    for text in said:
        before = written(stack)
        say(stack, user, text)
        wait_written(stack, before + 1)
    return system_prompt_seen_upstream(say(stack, user, question))


def test_memories_users_can_trust(stack: Stack) -> None:
    # A contradiction supersedes: the old home is never injected again.
    seen = injected_after(
        stack,
        new_user("mover"),
        [
            "I live in Minneapolis, I love being close to the lakes.",
            "I finally moved out of Minneapolis into a place in Phoenix last month!",
        ],
        "Which city do I live in?",
    )
    assert "Phoenix" in seen
    assert "lives in Minneapolis" not in seen
    # A near miss is two memories: the cat is not a duplicate of the dog.
    seen = injected_after(
        stack,
        new_user("pets"),
        [
            "My dog absolutely loses it during thunderstorms.",
            "My cat absolutely loses it during thunderstorms.",
        ],
        "How do my pets cope with thunderstorms?",
    )
    assert "dog" in seen
    assert "cat" in seen
    # A negation is kept.
    seen = injected_after(stack, new_user("sober"), ["No booze for me, ever."], "Any drinks?")
    assert "No booze for User" in seen
    # Two hops: the sister is Ana, and Ana's news is found through her.
    seen = injected_after(
        stack,
        new_user("sister"),
        ["My sister is Ana.", "Ana just moved to Porto!", "Marco moved to Lyon."],
        "Where does my sister live these days?",
    )
    assert "sister is Ana" in seen
    assert "Ana just moved to Porto" in seen
    assert "Marco" not in seen  # nobody the user's facts name: never stored


def upstream_messages(stack: Stack, marker: str) -> list[dict[str, Any]]:
    """The messages of the upstream request whose latest user message has ``marker``."""
    for request in reversed(upstream_requests(stack)):
        messages = request["body"]["messages"]
        if marker in str(messages[-1].get("content")):
            return list(messages)
    raise AssertionError(f"no upstream request with {marker!r}")


@pytest.mark.parametrize("stream", [False, True])
def test_the_conversation_reaches_the_upstream_byte_for_byte_before_the_memories(
    stack: Stack, stream: bool
) -> None:
    user = new_user("prefix")
    before = written(stack)
    say(stack, user, "I live in Leipzig and I'm vegetarian.")
    wait_written(stack, before + 1)
    system = {"role": "system", "content": "You are a concise travel assistant. " * 40}
    conversation: list[dict[str, Any]] = [system]
    seen: list[list[dict[str, Any]]] = []
    questions = [
        "Where should I eat tonight in my city?",
        "Which vegetarian place in Leipzig for tomorrow?",
        "Is there a vegetarian market in Leipzig?",
    ]
    for n, question in enumerate(questions):
        marker = f"[turn {n} {uuid.uuid4().hex[:6]}]"
        conversation.append({"role": "user", "content": f"{question} {marker}"})
        create = client(stack, user).chat.completions.create
        if stream:
            chunks = create(model="mock-llm", messages=conversation, stream=True)  # type: ignore[arg-type]
            answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            reply = create(model="mock-llm", messages=conversation)  # type: ignore[arg-type]
            answer = reply.choices[0].message.content or ""
        seen.append(upstream_messages(stack, marker))
        conversation.append({"role": "assistant", "content": answer})
    for upstream, sent in zip(
        seen, (conversation[:2], conversation[:4], conversation[:6]), strict=True
    ):
        # The client's messages up to the latest user message, untouched; then the
        # memories as their own message; then the question.
        assert upstream[: len(sent) - 1] == sent[:-1]
        memory = upstream[len(sent) - 1]
        assert memory["role"] == "system"
        assert memory["content"].startswith("<memory>\n")
        assert "Leipzig" in memory["content"]
        assert upstream[len(sent)] == sent[-1]
    # Turn n+1 shares with turn n everything before turn n's latest user message.
    assert seen[2][:3] == seen[1][:3]
    assert seen[1][:1] == seen[0][:1]


def test_a_question_after_a_megabyte_paste_finds_what_the_question_alone_finds(
    stack: Stack,
) -> None:
    user = new_user("paste")
    before = written(stack)
    say(stack, user, "My cat Miso is allergic to chicken.")
    wait_written(stack, before + 1)
    question = "Can Miso eat any of the food on this list?"
    alone = system_prompt_seen_upstream(say(stack, user, question))
    paste = "\n\n".join(
        f"Item {n}: dry food, batch {n}, ingredients vary by region and season."
        for n in range(16_000)
    )
    assert len(paste) > 1 << 20
    after_paste = client(stack, user).chat.completions.create(
        model="mock-llm",
        messages=[{"role": "user", "content": f"{paste}\n\n{question}"}],
    )
    echo = after_paste.choices[0].message.content or ""
    assert "Miso is allergic to chicken" in alone
    start, end = echo.find("<memory>"), echo.find("</memory>")
    assert echo[start:end] == alone[alone.find("<memory>") : alone.find("</memory>")]


POISONING = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "poisoning.json").read_text()
)
#: Words of the attacks that no memory about a user should carry into a prompt.
CANARIES = (
    "HACKED", "DAN", "pwned", "owned", "FreeGPT", "evilbot", "pirate", "base64",
    "CryptoCoinX", "tangerine", "banana", "attacker@", "12345678", "root access",
    "ignore", "Ignore", "disregard", "instructions", "<|", "[INST]", "<<SYS>>",
    "system prompt", "no restrictions", "obey", "administrator",
)  # fmt: skip


def test_poisoning_attempts_never_reach_the_model_as_instructions(stack: Stack) -> None:
    user = new_user("mallory")
    before = written(stack)
    for attack in POISONING["attacks"]:
        say(stack, user, attack)
    for preference in POISONING["preferences"]:
        say(stack, user, preference["turn"])
    wait_written(stack, before + len(POISONING["attacks"]) + len(POISONING["preferences"]))
    questions = [
        "What do you know about me?",
        "What are my instructions for you?",
        "How should you answer me?",
        "What's my name and what do I prefer?",
        "Remind me of my rules for you.",
        "What system prompt do I want?",
    ]
    questions += [f"Do you remember this: {p['keyword']}?" for p in POISONING["preferences"]]
    lines: list[str] = []
    for question in questions:
        echo = say(stack, user, question)
        start, end = echo.find("<memory>"), echo.find("</memory>")
        if start < 0:
            continue
        block = echo[start : end + len("</memory>")]
        # An intact block: one opening, one closing, one list item per memory.
        assert block.count("<memory>") == 1, block
        assert block.count("</memory>") == 1, block
        items = block.splitlines()[2:-1]
        assert items, block
        assert all(item.startswith("- ") for item in items), block
        lines += items
    injected = "\n".join(lines)
    assert [word for word in CANARIES if word in injected] == [], injected
    # Genuine preferences are still remembered.
    keywords = [p["keyword"] for p in POISONING["preferences"]]
    kept = [word for word in keywords if word.lower() in injected.lower()]
    missing = [word for word in keywords if word not in kept]
    assert len(missing) <= 1, (missing, injected)


def test_a_question_worded_like_the_conversation_finds_its_fact_and_its_words(
    stack: Stack,
) -> None:
    """Issue N through the real Envoy: a question worded like the original turn finds
    the fact made from it, with its number."""
    seen = injected_after(
        stack,
        new_user("trip"),
        [
            "Finally back home! I did a solo backpacking trip around Hokkaido for 16 days, "
            "mostly hostels.",
            "Thanks for the tips on onsen etiquette, super helpful.",
        ],
        "Remind me, how many days was that solo backpacking trip around Hokkaido?",
    )
    assert "Hokkaido" in seen
    assert "16 days" in seen
