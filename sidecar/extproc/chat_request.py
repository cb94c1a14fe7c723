"""The OpenAI chat-completions request body: parse, read, inject, encode; and the
Responses API's (``/v1/responses``), whose ``input`` items play the messages' part.

The body is kept as the parsed ``dict`` so that every field the sidecar does not
know survives (``tools``, ``response_format``, vendor extensions...), and, for a
UTF-8 body, with where each message sits in its bytes: an injection is spliced
into the body as sent (:mod:`sidecar.extproc.splice`), every byte outside the
message it adds or rewrites kept.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from sidecar.extproc.splice import Spans, scan

SYSTEM_ROLES = ("system", "developer")


def content_text(content: object) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part["text"]
            for part in content
            if isinstance(part, Mapping)
            and part.get("type") in ("text", "input_text", "output_text")
            and isinstance(part.get("text"), str)
        ]
        return "\n".join(parts)
    return ""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError("number out of range")
    return value


@dataclass(slots=True)
class ChatRequest:
    """A parsed ``/v1/chat/completions`` body."""

    #: The body's list of messages.
    KEY: ClassVar[str] = "messages"

    body: dict[str, Any]
    #: Where the messages sit in the body's text (``None``: re-serialise to encode).
    spans: Spans | None = None

    @classmethod
    def parse(cls, raw: bytes) -> ChatRequest | None:
        """``None`` unless ``raw`` is a JSON object with a ``messages`` list."""
        spans: Spans | None = None
        try:
            found = scan(raw, _reject_constant, _finite_float, cls.KEY)
        except UnicodeDecodeError:  # UTF-16/32 (JSON allows them): parsed, not spliced
            found = None
            try:
                body = json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
            except (ValueError, RecursionError):
                return None
        else:
            if found is None:
                return None
            body, spans = found
        if not isinstance(body, dict):
            return None
        return cls._read(body, spans)

    @classmethod
    def _read(cls, body: dict[str, Any], spans: Spans | None) -> ChatRequest | None:
        return cls(body, spans) if isinstance(body.get(cls.KEY), list) else None

    @property
    def messages(self) -> list[Any]:
        messages = self.body[self.KEY]
        return messages if isinstance(messages, list) else []

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    def latest_user_text(self) -> str | None:
        """The text of the last ``user`` message; ``None`` if absent or blank."""
        for message in reversed(self.messages):
            if isinstance(message, Mapping) and message.get("role") == "user":
                text = content_text(message.get("content")).strip()
                return text or None
        return None

    def latest_user_index(self) -> int:
        """The index of the last ``user`` message in ``messages`` (-1: none)."""
        for index in range(len(self.messages) - 1, -1, -1):
            message = self.messages[index]
            if isinstance(message, Mapping) and message.get("role") == "user":
                return index
        return -1

    def history(self, limit: int) -> list[tuple[str, str]]:
        """The last ``limit`` messages before the latest user message, as (role, text)."""
        messages = self.messages
        last_user = max(
            (
                i
                for i, m in enumerate(messages)
                if isinstance(m, Mapping) and m.get("role") == "user"
            ),
            default=len(messages),
        )
        turns = [
            (str(m.get("role")), content_text(m.get("content")))
            for m in messages[:last_user]
            if isinstance(m, Mapping) and m.get("role") in ("user", "assistant")
        ]
        return turns[-limit:] if limit > 0 else []

    def body_user_id(self) -> str | None:
        """The client-supplied ``user`` or ``metadata.user_id`` (untrusted)."""
        user = self.body.get("user")
        if isinstance(user, str) and user:
            return user
        metadata = self.body.get("metadata")
        if isinstance(metadata, Mapping):
            value = metadata.get("user_id")
            if isinstance(value, str) and value:
                return value
        return None

    def inject_system(self, block: str, mode: Literal["append", "prepend"]) -> None:
        """Add ``block`` to the system prompt.

        ``append``: appended (after a blank line) to the first system/developer
        message, or a new first system message when there is none. ``prepend``:
        always a new first system message, leaving the client's own untouched.
        """
        messages = self.messages
        if mode == "append":
            for index, message in enumerate(messages):
                if isinstance(message, dict) and message.get("role") in SYSTEM_ROLES:
                    content = message.get("content")
                    if isinstance(content, list):
                        content.append({"type": "text", "text": block})
                    elif isinstance(content, str) and content.strip():
                        message["content"] = f"{content}\n\n{block}"
                    else:
                        message["content"] = block
                    self._rewritten(index)
                    return
        self._insert(0, {"role": "system", "content": block})

    def inject_before_latest_user(self, block: str, role: str) -> None:
        """Insert ``block`` as a ``role`` message right before the latest user
        message: the messages before it stay as the client sent them (the
        upstream's cached prefix), the block sits next to the question it answers."""
        at = self._latest_user_index()
        self._insert(len(self.messages) if at is None else at, {"role": role, "content": block})

    def inject_into_latest_user(self, block: str) -> None:
        """Put ``block`` before the latest user message's text (as its first text
        part when the content is a list of parts)."""
        at = self._latest_user_index()
        if at is None:
            self._insert(len(self.messages), {"role": "user", "content": block})
            return
        message = self.messages[at]
        content = message.get("content")
        if isinstance(content, list):
            content.insert(0, {"type": "text", "text": block})
        elif isinstance(content, str) and content:
            message["content"] = f"{block}\n\n{content}"
        else:
            message["content"] = block
        self._rewritten(at)

    def _rewritten(self, index: int) -> None:
        if self.spans is not None:
            self.spans.replace(index, self.messages[index])

    def _insert(self, index: int, message: dict[str, Any]) -> None:
        if self.spans is not None:
            self.spans.insert(index, message)
        self.messages.insert(index, message)

    def _latest_user_index(self) -> int | None:
        for index in range(len(self.messages) - 1, -1, -1):
            message = self.messages[index]
            if isinstance(message, dict) and message.get("role") == "user":
                return index
        return None

    def encode(self) -> bytes:
        """The body with the injection: spliced into the bytes as sent when they were
        UTF-8, else the parsed body serialised."""
        if self.spans is not None and self.spans.edits:
            try:
                return self.spans.spliced()
            except UnicodeEncodeError:  # a lone surrogate in the block: serialise
                pass
        text = json.dumps(self.body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates from \ud800-style escapes
            return json.dumps(self.body, separators=(",", ":"), allow_nan=False).encode("ascii")


class ResponsesRequest(ChatRequest):
    """A parsed Responses API body (``/v1/responses``). Its ``input`` is the
    conversation: a string (one user message) or a list of items, of which those
    with a ``role`` are messages (``function_call``, ``reasoning`` and other items
    have none and are never touched). ``instructions`` is never rewritten — the
    block goes into ``input`` by the same placement rules as chat — and
    ``previous_response_id`` keeps naming the stored conversation before it."""

    __slots__ = ()
    KEY: ClassVar[str] = "input"

    @classmethod
    def _read(cls, body: dict[str, Any], spans: Spans | None) -> ChatRequest | None:
        given = body.get(cls.KEY)
        if isinstance(given, str):
            # One user message: as a list of one, so a block can go before it (the
            # body is then serialised anew, only when something is injected).
            body[cls.KEY] = [{"role": "user", "content": given}]
            return cls(body, None)
        return cls(body, spans) if isinstance(given, list) else None
