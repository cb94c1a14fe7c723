"""Reading the answer of an OpenAI Responses API call (``/v1/responses``; no I/O).

* :func:`parse_response_json` reads a ``response`` object (a non-streaming body,
  or the ``response`` of a stream's ``response.completed`` event).
* :class:`StreamedResponse` consumes a ``text/event-stream`` body of typed events
  (``response.output_text.delta`` ... ``response.completed``).

The answer is the text of the ``output_text`` parts of the assistant's ``message``
output items, in order; ``function_call`` items mark a tool call. A failed or
cancelled response, an ``error`` event or a stream that never completed has no
answer to store. Tolerant of whatever a server sends: nothing here raises on body
content or logs, and no ``repr`` carries the model's text.
"""

from __future__ import annotations

from sidecar.extproc.chat_response import CompletionResult, json_or_none
from sidecar.extproc.sse import SSEDecoder, SSEEvent

__all__ = ["StreamedResponse", "parse_response_json"]

#: Statuses of a response whose output text is an answer (``incomplete``: cut at
#: ``max_output_tokens``, as a chat completion that stopped at ``length``).
_ANSWERED = frozenset({"completed", "incomplete"})
#: Events that end a stream with the final response object.
_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete"})
#: Events that end a stream without an answer.
_FAILED_EVENTS = frozenset({"response.failed", "response.cancelled", "error"})


def _output_text(output: object) -> tuple[str, bool]:
    """The assistant's text in ``output`` (a list of items) and whether it calls a
    tool."""
    if not isinstance(output, list):
        return "", False
    texts: list[str] = []
    tools = False
    for item in output:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind in ("function_call", "custom_tool_call"):
            tools = True
        elif kind == "message" and item.get("role", "assistant") == "assistant":
            content = item.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts.extend(
                    part["text"]
                    for part in content
                    if isinstance(part, dict)
                    and part.get("type") == "output_text"
                    and isinstance(part.get("text"), str)
                )
    return "".join(texts), tools


def _result(doc: dict[object, object]) -> CompletionResult | None:
    """The answer of a ``response`` object; ``None`` when it has none."""
    if doc.get("error"):
        return None
    status = doc.get("status")
    if status is not None and status not in _ANSWERED:
        return None
    text, tools = _output_text(doc.get("output"))
    model = doc.get("model")
    details = doc.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    return CompletionResult(
        text=text,
        finish_reason=str(reason) if reason else ("tool_calls" if tools else "stop"),
        model=model if isinstance(model, str) and model else None,
        has_tool_calls=tools,
    )


def parse_response_json(body: bytes) -> CompletionResult | None:
    """The answer of a non-streaming Responses API body; ``None`` when it is not a
    JSON ``response`` object, is an error, or failed."""
    doc = json_or_none(body)
    if not isinstance(doc, dict) or doc.get("object", "response") != "response":
        return None
    return _result(doc)


class StreamedResponse:
    """Accumulates a streamed response (``stream: true``): feed body bytes
    (:meth:`feed_bytes`), then :meth:`finish`. The answer is the final response
    object's text when a ``response.completed`` (or ``response.incomplete``) event
    carried one, else the ``response.output_text.delta`` pieces; the stream is
    :attr:`complete` only after such an event, never after a failure."""

    def __init__(self, *, decoder: SSEDecoder | None = None) -> None:
        self._decoder = decoder if decoder is not None else SSEDecoder()
        self._deltas: list[str] = []
        self._final: CompletionResult | None = None
        self._ended = False
        self._failed = False
        self.events = 0
        self.malformed_events = 0

    def feed_bytes(self, chunk: bytes) -> None:
        for event in self._decoder.feed(chunk):
            self.feed_event(event)

    def finish(self) -> None:
        for event in self._decoder.finish():
            self.feed_event(event)

    def feed_event(self, event: SSEEvent) -> None:
        if self._ended or self._failed:
            return
        doc = json_or_none(event.data)
        if not isinstance(doc, dict):
            self.malformed_events += 1
            return
        self.events += 1
        kind = doc.get("type", event.event)
        if kind == "response.output_text.delta":
            delta = doc.get("delta")
            if isinstance(delta, str):
                self._deltas.append(delta)
        elif kind in _FINAL_EVENTS:
            self._ended = True
            response = doc.get("response")
            if isinstance(response, dict):
                self._final = _result(response)
                self._failed = self._final is None
        elif kind in _FAILED_EVENTS:
            self._failed = True

    @property
    def complete(self) -> bool:
        """The stream ended with a response that has an answer."""
        return self._ended and not self._failed

    def result(self) -> CompletionResult:
        if self._final is not None and (self._final.text or not self._deltas):
            return self._final
        return CompletionResult(
            text="".join(self._deltas), finish_reason="stop", model=None, has_tool_calls=False
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(events={self.events}, malformed={self.malformed_events}, "
            f"ended={self._ended}, failed={self._failed})"
        )
