"""Reassembling an OpenAI chat completion from a response body (no I/O).

* :class:`StreamedCompletion` consumes a ``text/event-stream`` body of
  ``chat.completion.chunk`` objects, as :class:`~sidecar.extproc.sse.SSEEvent`
  objects or as raw bytes, and accumulates the answer.
* :func:`parse_completion_json` reads a non-streaming ``chat.completion`` body.

Both are tolerant of whatever an "OpenAI-compatible" server sends: unexpected
shapes are skipped, nothing here raises on body content. Both produce a
:class:`CompletionResult`. Nothing in this module logs, and the ``repr`` of
every object here leaves the model's text out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sidecar.extproc.sse import SSEDecoder, SSEEvent

__all__ = [
    "CompletionResult",
    "StreamedCompletion",
    "ToolCall",
    "parse_completion_json",
]

_DONE = "[DONE]"
_TOOL_FINISH_REASONS = frozenset({"tool_calls", "function_call"})
_TEXT_PART_TYPES = frozenset({"text", "output_text"})


@dataclass(frozen=True, slots=True)
class CompletionResult:
    """The assistant answer of a chat completion (choice 0 by default).

    ``text`` is the assistant content ("" when there was none, e.g. a pure
    tool call); it is left out of ``repr``.
    """

    text: str = field(repr=False)
    finish_reason: str | None
    model: str | None
    has_tool_calls: bool


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call reassembled from streamed deltas (``arguments`` not in repr)."""

    index: int
    id: str | None
    type: str | None
    name: str
    arguments: str = field(repr=False)


class _ToolCallState:
    __slots__ = ("arguments", "id", "index", "name", "type")

    def __init__(self, index: int) -> None:
        self.index = index
        self.id: str | None = None
        self.type: str | None = None
        self.name: list[str] = []
        self.arguments: list[str] = []

    def snapshot(self) -> ToolCall:
        return ToolCall(
            index=self.index,
            id=self.id,
            type=self.type,
            name="".join(self.name),
            arguments="".join(self.arguments),
        )


class _ChoiceState:
    __slots__ = ("content", "finish_reason", "has_tool_calls", "role", "tool_calls")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.role: str | None = None
        self.finish_reason: str | None = None
        self.has_tool_calls = False
        self.tool_calls: dict[int, _ToolCallState] = {}

    def apply_delta(self, delta: dict[object, object]) -> None:
        role = delta.get("role")
        if isinstance(role, str):
            self.role = role
        text = _content_text(delta.get("content"))
        if text:
            self.content.append(text)
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list) and tool_calls:
            self.has_tool_calls = True
            for position, item in enumerate(tool_calls):
                if isinstance(item, dict):
                    self._apply_tool_call(_index_of(item, position), item)
        function_call = delta.get("function_call")  # legacy single-function API
        if isinstance(function_call, dict):
            self.has_tool_calls = True
            legacy: dict[object, object] = {"type": "function", "function": function_call}
            self._apply_tool_call(0, legacy)

    def _apply_tool_call(self, index: int, item: dict[object, object]) -> None:
        state = self.tool_calls.get(index)
        if state is None:
            state = self.tool_calls[index] = _ToolCallState(index)
        call_id = item.get("id")
        if isinstance(call_id, str) and call_id:
            state.id = call_id
        call_type = item.get("type")
        if isinstance(call_type, str) and call_type:
            state.type = call_type
        function = item.get("function")
        if isinstance(function, dict):
            # Like openai-python's delta accumulation, string pieces concatenate.
            name = function.get("name")
            if isinstance(name, str):
                state.name.append(name)
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                state.arguments.append(arguments)


def _index_of(item: dict[object, object], default: int) -> int:
    index = item.get("index")
    if isinstance(index, int) and not isinstance(index, bool) and index >= 0:
        return index
    return default


def _content_text(content: object) -> str | None:
    """Text of a message/delta ``content``: a string, ``None`` or a list of parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    pieces: list[str] = []
    for part in content:
        if isinstance(part, str):
            pieces.append(part)
        elif isinstance(part, dict):
            text = part.get("text")
            part_type = part.get("type", "text")
            if isinstance(text, str) and part_type in _TEXT_PART_TYPES:
                pieces.append(text)
    return "".join(pieces)


def _error_of(doc: dict[object, object]) -> dict[str, object] | None:
    """The error carried by a response object, normalized to a dict, or None.

    Recognizes ``{"error": {...}}`` / ``{"error": "message"}`` (OpenAI, recent
    vLLM) and ``{"object": "error", "message": ...}`` (older vLLM, others).
    """
    error = doc.get("error")
    if isinstance(error, dict):
        return {str(key): value for key, value in error.items()}
    if error:  # a bare message (or code); null/""/false mean "no error"
        return {"message": error if isinstance(error, str) else str(error)}
    if doc.get("object") == "error":
        return {str(key): value for key, value in doc.items() if key != "object"}
    return None


def json_or_none(data: str | bytes) -> object:
    """``json.loads`` that returns ``None`` instead of raising on bad input."""
    try:
        result: object = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return result


def _pick_choice(choices: list[object], index: int) -> dict[object, object] | None:
    """The choice dict with ``index`` (by its ``index`` key, else by position)."""
    for position, choice in enumerate(choices):
        if isinstance(choice, dict) and _index_of(choice, position) == index:
            return choice
    return None


class StreamedCompletion:
    """Accumulates a streamed chat completion (``stream: true``).

    Feed it either :class:`SSEEvent` objects (:meth:`feed_event`) or raw body
    bytes (:meth:`feed_bytes`, decoded by an internal :class:`SSEDecoder`),
    then call :meth:`finish` at end of body. Each event's data is parsed as a
    ``chat.completion.chunk`` JSON object; ``data: [DONE]`` ends the stream and
    everything after it is ignored. Content is accumulated per choice index;
    ``answer_index`` (default 0) selects the choice reported by :attr:`text`
    and :meth:`result`. Data that is not a JSON object is counted in
    :attr:`malformed_chunks` and skipped. An error object (``{"error": ...}``)
    is recorded in :attr:`error` (the first one wins). Never raises on body
    content.
    """

    __slots__ = (
        "_answer_index",
        "_choices",
        "_decoder",
        "_error",
        "_finished",
        "_id",
        "_model",
        "_saw_done",
        "_usage",
        "chunks",
        "malformed_chunks",
    )

    def __init__(self, *, answer_index: int = 0, decoder: SSEDecoder | None = None) -> None:
        """Create an accumulator; ``decoder`` overrides the default SSE limits."""
        self._answer_index = answer_index
        self._decoder = decoder if decoder is not None else SSEDecoder()
        self._choices: dict[int, _ChoiceState] = {}
        self._id: str | None = None
        self._model: str | None = None
        self._usage: dict[str, object] | None = None
        self._error: dict[str, object] | None = None
        self._saw_done = False
        self._finished = False
        # Public counters: JSON-object chunks applied, and data payloads skipped
        # because they were not JSON objects.
        self.chunks = 0
        self.malformed_chunks = 0

    # -- feeding ---------------------------------------------------------

    def feed_bytes(self, chunk: bytes) -> None:
        """Consume a chunk of the raw ``text/event-stream`` body."""
        if self._saw_done or self._finished:
            return
        for event in self._decoder.feed(chunk):
            self.feed_event(event)

    def finish(self) -> None:
        """End of body: flush the internal decoder. Idempotent."""
        if self._finished:
            return
        self._finished = True
        if not self._saw_done:
            for event in self._decoder.finish():
                self.feed_event(event)

    def feed_event(self, event: SSEEvent) -> None:
        """Apply one decoded SSE event."""
        if self._saw_done:
            return
        if event.data.strip() == _DONE:
            self._saw_done = True
            return
        doc = json_or_none(event.data)
        if not isinstance(doc, dict):
            if event.event == "error" and self._error is None:
                self._error = {"message": event.data}
            else:
                self.malformed_chunks += 1
            return
        self.chunks += 1
        self._apply_chunk(doc)
        if event.event == "error" and self._error is None:
            self._error = _error_of(doc) or {str(key): value for key, value in doc.items()}

    def _apply_chunk(self, doc: dict[object, object]) -> None:
        error = _error_of(doc)
        if error is not None:
            if self._error is None:
                self._error = error
            return
        chunk_id = doc.get("id")
        if self._id is None and isinstance(chunk_id, str) and chunk_id:
            self._id = chunk_id
        model = doc.get("model")
        if self._model is None and isinstance(model, str) and model:
            self._model = model
        usage = doc.get("usage")
        if isinstance(usage, dict):
            self._usage = {str(key): value for key, value in usage.items()}
        choices = doc.get("choices")
        if not isinstance(choices, list):
            return
        for position, choice in enumerate(choices):
            if isinstance(choice, dict):
                self._apply_choice(_index_of(choice, position), choice)

    def _apply_choice(self, index: int, choice: dict[object, object]) -> None:
        state = self._choices.get(index)
        if state is None:
            state = self._choices[index] = _ChoiceState()
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            # Some servers put a full ``message`` in stream chunks.
            delta = choice.get("message")
        if isinstance(delta, dict):
            state.apply_delta(delta)
        else:
            text = choice.get("text")  # legacy text completion stream
            if isinstance(text, str) and text:
                state.content.append(text)
        finish_reason = choice.get("finish_reason")
        if isinstance(finish_reason, str) and finish_reason:
            state.finish_reason = finish_reason
            if finish_reason in _TOOL_FINISH_REASONS:
                state.has_tool_calls = True

    # -- results ---------------------------------------------------------

    def _answer(self) -> _ChoiceState | None:
        return self._choices.get(self._answer_index)

    def choice_text(self, index: int) -> str:
        """Accumulated content of the choice with ``index`` ("" if unseen)."""
        state = self._choices.get(index)
        return "".join(state.content) if state is not None else ""

    @property
    def choice_indices(self) -> tuple[int, ...]:
        """Indices of the choices seen so far, ascending."""
        return tuple(sorted(self._choices))

    @property
    def text(self) -> str:
        """Accumulated content of the answer choice."""
        return self.choice_text(self._answer_index)

    @property
    def role(self) -> str | None:
        """Role announced for the answer choice (normally "assistant")."""
        state = self._answer()
        return state.role if state is not None else None

    @property
    def finish_reason(self) -> str | None:
        """Finish reason of the answer choice, once seen."""
        state = self._answer()
        return state.finish_reason if state is not None else None

    @property
    def has_tool_calls(self) -> bool:
        """Whether the answer choice called tools (or functions)."""
        state = self._answer()
        return state.has_tool_calls if state is not None else False

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """Tool calls of the answer choice, reassembled, by tool call index."""
        state = self._answer()
        if state is None:
            return ()
        return tuple(state.tool_calls[i].snapshot() for i in sorted(state.tool_calls))

    @property
    def id(self) -> str | None:
        """The completion id (first one seen)."""
        return self._id

    @property
    def model(self) -> str | None:
        """The model name (first one seen)."""
        return self._model

    @property
    def usage(self) -> dict[str, object] | None:
        """A copy of the last ``usage`` object seen, if any."""
        return dict(self._usage) if self._usage is not None else None

    @property
    def error(self) -> dict[str, object] | None:
        """A copy of the first error object seen, if any."""
        return dict(self._error) if self._error is not None else None

    @property
    def saw_done(self) -> bool:
        """Whether ``data: [DONE]`` was seen."""
        return self._saw_done

    @property
    def done(self) -> bool:
        """Whether the stream ended: ``[DONE]`` or the answer's finish reason seen."""
        return self._saw_done or self.finish_reason is not None

    @property
    def complete(self) -> bool:
        """Whether the answer finished normally: a finish reason and no error."""
        return self.finish_reason is not None and self._error is None

    @property
    def dropped_events(self) -> int:
        """Events/lines the internal SSE decoder discarded for size."""
        return self._decoder.dropped

    def result(self) -> CompletionResult:
        """The answer so far as a :class:`CompletionResult`."""
        return CompletionResult(
            text=self.text,
            finish_reason=self.finish_reason,
            model=self._model,
            has_tool_calls=self.has_tool_calls,
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self._model!r}, chunks={self.chunks}, "
            f"malformed_chunks={self.malformed_chunks}, finish_reason={self.finish_reason!r}, "
            f"saw_done={self._saw_done}, error={self._error is not None})"
        )


def parse_completion_json(body: bytes) -> CompletionResult | None:
    """Parse a non-streaming ``chat.completion`` body, tolerantly.

    Returns the answer of choice 0: its message content (a string, ``null``
    → "", or a list of content parts whose text parts are concatenated), its
    finish reason, the model and whether it called tools. A legacy
    ``text_completion`` choice's ``text`` is accepted too. Returns ``None``
    when the body is not JSON, not an object, an error object, or has no
    choice 0. Never raises.
    """
    doc = json_or_none(body)
    if not isinstance(doc, dict) or _error_of(doc) is not None:
        return None
    choices = doc.get("choices")
    if not isinstance(choices, list):
        return None
    choice = _pick_choice(choices, 0)
    if choice is None:
        return None
    has_tool_calls = False
    text: str | None = None
    message = choice.get("message")
    if isinstance(message, dict):
        text = _content_text(message.get("content"))
        tool_calls = message.get("tool_calls")
        has_tool_calls = (isinstance(tool_calls, list) and bool(tool_calls)) or isinstance(
            message.get("function_call"), dict
        )
    else:
        legacy_text = choice.get("text")
        if isinstance(legacy_text, str):
            text = legacy_text
    finish_reason = choice.get("finish_reason")
    if not isinstance(finish_reason, str) or not finish_reason:
        finish_reason = None
    elif finish_reason in _TOOL_FINISH_REASONS:
        has_tool_calls = True
    model = doc.get("model")
    return CompletionResult(
        text=text or "",
        finish_reason=finish_reason,
        model=model if isinstance(model, str) and model else None,
        has_tool_calls=has_tool_calls,
    )
