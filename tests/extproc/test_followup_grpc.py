"""Follow-up rewriting and deep search through the request path, in process: a real
gRPC server driven like Envoy, with the deterministic mock LLM answering the
sidecar's ``rewrite`` and ``rank`` prompts."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from e2e.mock_llm import MockLLM
from sidecar.config import SidecarConfig
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import Scope
from sidecar.memory.records.turns import Turn
from sidecar.runtime.server import Sidecar
from tests.extproc import messages as msg
from tests.extproc.test_service_grpc import exchange, mutated_body
from tests.support.boot import running_sidecar, sidecar_config

DEBUG = {"debug_headers": True}
FACTS = (
    "My sister Ana settled in Lisbon last spring.",
    "My colleague Mia lives above a bakery.",
    "I play tennis on Sundays.",
)
HISTORY = [
    {"role": "user", "content": "I want to ask you about my sister Ana."},
    {"role": "assistant", "content": "Sure, what would you like to know about Ana?"},
]


def make_config(tmp: Path, mock: MockLLM) -> SidecarConfig:
    deep = {"mode": "on", "threshold": 1.0, "timeout_ms": 3000}
    return sidecar_config(
        tmp,
        llm={"base_url": mock.base_url, "model": "mock-llm"},
        envoy={"message_timeout_ms": 5000},
        profiles={
            "followup": {"retrieval": {"top_k": 1}, "injection": DEBUG},
            "deep": {
                "injection": DEBUG,
                "deep_search": {**deep, "feedback_path": str(tmp / "deep.jsonl")},
            },
            "shadow": {
                "retrieval": {"top_k": 1},
                "injection": DEBUG,
                "deep_search": {
                    **deep,
                    "mode": "shadow",
                    "feedback_path": str(tmp / "shadow.jsonl"),
                },
            },
            "limited": {
                "injection": DEBUG,
                "deep_search": {**deep, "rate_limit": 1, "feedback_path": ""},
            },
        },
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("followup")


@pytest.fixture(scope="module")
async def sidecar(
    workdir: Path, module_mock_llm: MockLLM, embedder: Embedder
) -> AsyncIterator[Sidecar]:
    async with running_sidecar(make_config(workdir, module_mock_llm), embedder) as server:
        yield server


async def seeded_user(sidecar: Sidecar, facts: tuple[str, ...] = FACTS) -> str:
    user = f"user-{uuid.uuid4().hex[:8]}"
    for fact in facts:
        turn = Turn(
            user_id=user, user_text=fact, assistant_text="Noted.", created_at=1_700_000_000_000
        )
        await sidecar.components.write.writer.write_turn(turn)
    return user


def chat(question: str, history: list[dict[str, str]] | None = None) -> bytes:
    messages = [*(history or []), {"role": "user", "content": question}]
    return json.dumps({"model": "m", "messages": messages}).encode()


async def ask(
    channel: grpc.aio.Channel,
    user: str,
    body: bytes,
    profile: str,
    session: str | None = None,
) -> tuple[str, dict[str, str]]:
    """(the injected system block, the response headers set by the sidecar)."""
    extra = {"x-session-id": session} if session else None
    replies = await exchange(
        channel,
        [
            msg.request_headers(user=user, extra=extra),
            msg.request_body(body),
            msg.response_headers(),
        ],
        profile=profile,
    )
    block = ""
    if replies[1].request_body.response.HasField("body_mutation"):
        found = msg.memory_message(mutated_body(replies[1]))
        block = found["content"] if found is not None and found["role"] == "system" else ""
    headers = msg.header_values(replies[2].response_headers.response.header_mutation)
    return block, headers


def tasks(mock: MockLLM, name: str) -> int:
    count: int = mock.stats()["tasks"].get(name, 0)
    return count


def llm_calls(sidecar: Sidecar, task: str) -> float:
    metrics = sidecar.components.metrics
    return sum(
        metrics.value("memory_sidecar_llm_calls_total", {"task": task, "outcome": outcome})
        for outcome in ("ok", "timeout", "http_error", "unavailable", "empty", "bad_output")
    )


async def test_clear_query_takes_the_fast_path_without_an_llm_call(
    sidecar: Sidecar, channel: grpc.aio.Channel, module_mock_llm: MockLLM
) -> None:
    user = await seeded_user(sidecar, ("I work as a nurse.",))
    metrics = sidecar.components.metrics
    before = (tasks(module_mock_llm, "rewrite"), llm_calls(sidecar, "rewrite"))
    fast = metrics.value("memory_sidecar_rewrites_total", {"reason": "fast_path"})
    block, headers = await ask(channel, user, chat("What is my job?", HISTORY), "followup")
    assert "User works as a nurse." in block
    assert headers["x-memory-rewrite"] == "fast_path;confidence=1.00"
    assert (tasks(module_mock_llm, "rewrite"), llm_calls(sidecar, "rewrite")) == before
    assert metrics.value("memory_sidecar_rewrites_total", {"reason": "fast_path"}) == fast + 1


async def test_ambiguous_followup_finds_the_right_memory_only_thanks_to_the_rewrite(
    sidecar: Sidecar, channel: grpc.aio.Channel, module_mock_llm: MockLLM
) -> None:
    user = await seeded_user(sidecar)
    calls = tasks(module_mock_llm, "rewrite")
    # The question alone: nothing to resolve from, no LLM call; the other memory wins.
    # (Asked first: an injected memory is used more, which the re-rank rewards.)
    block, headers = await ask(channel, user, chat("Where does she live now?"), "followup")
    assert "Mia lives above a bakery" in block
    assert "Ana" not in block
    assert headers["x-memory-rewrite"] == "low_confidence;confidence=0.00"
    assert tasks(module_mock_llm, "rewrite") == calls
    block, headers = await ask(channel, user, chat("Where does she live now?", HISTORY), "followup")
    assert "User's sister Ana settled in Lisbon last spring." in block
    assert "Mia" not in block
    assert headers["x-memory-rewrite"].startswith("llm;confidence=")
    assert "Ana" not in headers["x-memory-rewrite"]  # never query text in headers
    assert tasks(module_mock_llm, "rewrite") == calls + 1
    rewrite_prompt = module_mock_llm.task_requests("rewrite")[-1]["body"]["messages"]
    assert rewrite_prompt[0]["content"].startswith("[memory-sidecar:rewrite v1]")
    assert rewrite_prompt[1]["content"].endswith("LATEST: Where does she live now?")
    # Asked again with the conversation: answered from the cache.
    _, headers = await ask(channel, user, chat("Where does she live now?", HISTORY), "followup")
    assert headers["x-memory-rewrite"].startswith("cache;")
    assert tasks(module_mock_llm, "rewrite") == calls + 1


async def test_deep_search_on_ranks_with_the_llm_and_records_feedback(
    sidecar: Sidecar, channel: grpc.aio.Channel, module_mock_llm: MockLLM, workdir: Path
) -> None:
    user = await seeded_user(sidecar)
    await ask(channel, user, chat("What do I play?"), "deep")  # loads the user's corpus
    ranks = tasks(module_mock_llm, "rank")
    block, headers = await ask(channel, user, chat("Where does she live now?", HISTORY), "deep")
    assert "Ana settled in Lisbon" in block
    deep = headers["x-memory-deep-search"]
    assert deep.startswith("escalate;confidence=")
    assert ";outcome=ok;method=llm;" in deep
    assert tasks(module_mock_llm, "rank") == ranks + 1
    prompt = module_mock_llm.task_requests("rank")[-1]["body"]["messages"]
    assert prompt[0]["content"].startswith("[memory-sidecar:rank v1]")
    assert "[c1] " in prompt[1]["content"]
    await sidecar.components.read.pipeline.deep.drain()
    records = [json.loads(line) for line in (workdir / "deep.jsonl").read_text().splitlines()]
    entry = records[-1]
    assert entry["profile"] == "deep"
    assert entry["mode"] == "on"
    assert entry["method"] == "llm"
    assert len(entry["query_sha256"]) == 64
    assert "query" not in entry
    assert entry["deep_ids"]


async def test_shadow_mode_changes_nothing_injected_but_records_feedback(
    sidecar: Sidecar, channel: grpc.aio.Channel, module_mock_llm: MockLLM, workdir: Path
) -> None:
    user = await seeded_user(sidecar)
    await ask(channel, user, chat("What do I play?"), "followup")  # loads the corpus
    question = chat("Where does she live now?")  # unresolvable: primary finds Mia
    plain, _ = await ask(channel, user, question, "followup")
    ranks = tasks(module_mock_llm, "rank")
    shadow, headers = await ask(channel, user, question, "shadow")
    assert shadow == plain
    assert headers["x-memory-deep-search"].startswith("shadow;confidence=")
    await sidecar.components.read.pipeline.deep.drain()
    assert tasks(module_mock_llm, "rank") == ranks + 1
    entry = json.loads((workdir / "shadow.jsonl").read_text().splitlines()[-1])
    assert entry["mode"] == "shadow"
    assert len(entry["primary_ids"]) == 1  # top_k 1: what was injected


async def test_deep_search_never_reads_another_users_memories(
    sidecar: Sidecar, channel: grpc.aio.Channel, workdir: Path
) -> None:
    owner = await seeded_user(sidecar)
    stranger = await seeded_user(sidecar, ("I play chess on Mondays.",))
    await ask(channel, stranger, chat("What do I play?"), "deep")  # loads the corpus
    block, headers = await ask(channel, stranger, chat("Where does Ana live now?"), "deep")
    assert headers["x-memory-deep-search"].startswith("escalate;")
    assert "Lisbon" not in block
    assert "bakery" not in block
    await sidecar.components.read.pipeline.deep.drain()
    entry = json.loads((workdir / "deep.jsonl").read_text().splitlines()[-1])
    corpus = await sidecar.components.read.memory.cache.corpus(Scope(owner))
    assert corpus.size >= 3
    assert not set(entry["deep_ids"]) & {r.id for r in corpus.records}


async def test_escalations_are_rate_limited_per_session(
    sidecar: Sidecar, channel: grpc.aio.Channel
) -> None:
    user = await seeded_user(sidecar, ("I play chess on Mondays.",))
    await ask(channel, user, chat("What do I play?"), "limited", session="warmup")
    _, first = await ask(channel, user, chat("What do I play?"), "limited", session="s-1")
    _, second = await ask(channel, user, chat("What do I play?"), "limited", session="s-1")
    _, other = await ask(channel, user, chat("What do I play?"), "limited", session="s-2")
    assert first["x-memory-deep-search"].startswith("escalate;")
    assert second["x-memory-deep-search"].startswith("rate_limited;")
    assert other["x-memory-deep-search"].startswith("escalate;")
