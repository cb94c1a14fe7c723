"""The mock LLM's answer to the extract prompt (``e2e/mock_extract.py``): over HTTP
as the sidecar asks for it, and its rules sentence by sentence.
"""

from __future__ import annotations

import json

import pytest
from openai import AsyncOpenAI

from e2e.mock_extract import extract_facts, parse_extract_turn
from e2e.mock_llm import MockLLM
from tests.e2e_support.mock_llm_support import ask, extract_messages, turn

# ---------------------------------------------------------------------------
# The extract task
# ---------------------------------------------------------------------------


async def test_extract_task_returns_expected_facts(mock: MockLLM, client: AsyncOpenAI) -> None:
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
    assert mock.stats()["tasks"] == {"extract": 1}
    assert mock.stats()["echo"] == 0


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
