"""Through the real Envoy: an ambiguous follow-up gets the right memory injected only
thanks to the query rewrite (the mock LLM answers the sidecar's rewrite prompt),
and the debug header reports the decision without any query text."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import openai
import pytest

from e2e.stack import Stack, running_stack
from tests.e2e.test_envoy_flow import system_prompt_seen_upstream, wait_written, written

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    overrides = {"defaults": {"retrieval": {"top_k": 1}, "injection": {"debug_headers": True}}}
    with running_stack(tmp_path_factory.mktemp("e2e-followup"), config_overrides=overrides) as s:
        yield s


def test_followup_pronoun_is_resolved_before_retrieval(stack: Stack) -> None:
    user = f"fern-{uuid.uuid4().hex[:6]}"
    with openai.OpenAI(
        base_url=stack.base_url,
        api_key="unused",
        default_headers={"x-user-id": user},
        max_retries=0,
        timeout=30,
    ) as client:
        before = written(stack)
        facts = (
            "My sister Ana settled in Lisbon last spring. My colleague Mia lives above a "
            "bakery. I play tennis on Sundays."
        )
        client.chat.completions.create(
            model="mock-llm", messages=[{"role": "user", "content": facts}]
        )
        wait_written(stack, before + 1)

        question = {"role": "user", "content": "Where does she live now?"}
        # Alone, the question has nothing to resolve from: the other memory wins.
        alone = client.chat.completions.with_raw_response.create(
            model="mock-llm",
            messages=[question],  # type: ignore[list-item]
        )
        block = system_prompt_seen_upstream(alone.parse().choices[0].message.content or "")
        assert "Mia lives above a bakery" in block
        assert "Ana" not in block
        assert alone.headers["x-memory-rewrite"] == "low_confidence;confidence=0.00"

        history = [
            {"role": "user", "content": "I want to ask you about my sister Ana."},
            {"role": "assistant", "content": "Sure, what would you like to know about Ana?"},
        ]
        raw = client.chat.completions.with_raw_response.create(
            model="mock-llm",
            messages=[*history, question],  # type: ignore[list-item]
        )
    block = system_prompt_seen_upstream(raw.parse().choices[0].message.content or "")
    assert "User's sister Ana settled in Lisbon last spring." in block
    assert "Mia" not in block
    header = raw.headers["x-memory-rewrite"]
    assert header.startswith("llm;confidence=")
    assert "Ana" not in header  # reasons and numbers only, never query text
    assert raw.headers["x-memory-injected"] == "1"
