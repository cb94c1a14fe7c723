"""What the mock LLM reads from a chat request, and its answer to ordinary ones.

The conventions every part of the mock shares with the sidecar and the tests: the
text of a message's ``content`` (a string or a list of parts), the task tag the
sidecar puts at the start of its own prompts (``[memory-sidecar:<task> v<N>]``),
the :data:`TaskHandler` signature the task answers implement, and the echo answer
given to untagged requests. Kept apart from the HTTP service so that a task answer
(:mod:`e2e.mock_extract`) and the tests can use it without the service and aiohttp.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

ECHO_HEADER: Final = "ECHO"

# ---------------------------------------------------------------------------
# Message helpers
# ---------------------------------------------------------------------------


def flatten_content(content: object) -> str:
    """Return the text of a message ``content`` (a string or a list of parts).

    A list of content parts is flattened to its ``{"type": "text"}`` parts,
    joined with newlines; other parts (images, audio) are dropped.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text":
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
        return "\n".join(texts)
    return str(content)


def request_messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The messages of a request body that are objects (anything else is skipped)."""
    raw = body.get("messages")
    if not isinstance(raw, list):
        return []
    return [m for m in raw if isinstance(m, Mapping)]


def build_echo(messages: Sequence[Mapping[str, Any]]) -> str:
    """The echo-mode answer: ``ECHO`` then one ``[role] content`` block per message."""
    lines = [ECHO_HEADER]
    for message in messages:
        role = str(message.get("role", "unknown"))
        text = flatten_content(message.get("content"))
        tool_calls = message.get("tool_calls")
        if not text and isinstance(tool_calls, list) and tool_calls:
            names = [
                str(call.get("function", {}).get("name", "?"))
                for call in tool_calls
                if isinstance(call, Mapping)
            ]
            text = f"(tool_calls: {', '.join(names)})"
        lines.append(f"[{role}] {text}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Task tags
# ---------------------------------------------------------------------------

TASK_TAG_RE: Final = re.compile(
    r"\A\s*\[memory-sidecar:(?P<task>[a-z][a-z0-9_-]*) v(?P<version>\d+)\]"
)


@dataclasses.dataclass(frozen=True, slots=True)
class TaskTag:
    """A parsed ``[memory-sidecar:<task> v<N>]`` tag."""

    task: str
    version: int


def format_task_tag(task: str, version: int = 1) -> str:
    """Build the tag the sidecar puts at the start of its first system message."""
    return f"[memory-sidecar:{task} v{version}]"


def parse_task_tag(body: Mapping[str, Any]) -> TaskTag | None:
    """Return the task tag of a chat request, or ``None`` for an ordinary request.

    Only the first ``system`` (or ``developer``) message is looked at, and the
    tag must be at its very start (leading whitespace is tolerated).
    """
    for message in request_messages(body):
        if message.get("role") in ("system", "developer"):
            match = TASK_TAG_RE.match(flatten_content(message.get("content")))
            if match is None:
                return None
            return TaskTag(match["task"], int(match["version"]))
    return None


TaskHandler = Callable[[Mapping[str, Any]], str]
"""A task handler gets the parsed request body and returns the assistant content."""
