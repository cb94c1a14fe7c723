"""Helpers of the mock LLM's tests: its extract prompt as the sidecar sends it, and
one completion asked through the OpenAI client. The fixtures that start a mock
and connect to it are in ``conftest.py`` beside this module.
"""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion

from e2e.mock_protocol import format_task_tag

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


async def ask(client: AsyncOpenAI, messages: Any, **kwargs: Any) -> str:
    """One non-streamed completion; ``messages`` is loosely typed for odd shapes."""
    completion: ChatCompletion = await client.chat.completions.create(
        model="test-model", messages=messages, **kwargs
    )
    content = completion.choices[0].message.content
    assert content is not None
    return content
