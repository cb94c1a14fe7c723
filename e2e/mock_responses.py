"""The mock's OpenAI Responses API (``POST /v1/responses``), JSON or typed SSE events.

Like chat completions it *echoes* what the model would see, so a test can read back
what the sidecar injected::

    ECHO
    [instructions] <instructions>
    [system] <an input item's text>
    [user] <content>

Items without a role (``function_call_output`` ...) echo as ``[<type>]``. A stream
sends the events the OpenAI SDK reads (``response.created`` ...
``response.output_text.delta`` ... ``response.completed``), with no ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from e2e.mock_config import MockConfig
from e2e.mock_protocol import ECHO_HEADER


def item_text(content: object) -> str:
    """The text of an input item's ``content``: a string, or its text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping)
            and part.get("type") in ("input_text", "output_text", "text")
        )
    return ""


def echo_input(body: Mapping[str, Any]) -> str:
    """The echo answer of a Responses request: its instructions, then each input item."""
    lines = [ECHO_HEADER]
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        lines.append(f"[instructions] {instructions}")
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping):
            continue
        role = item.get("role")
        if isinstance(role, str):
            lines.append(f"[{role}] {item_text(item.get('content'))}")
        else:
            lines.append(f"[{item.get('type', 'unknown')}]")
    return "\n".join(lines)


def response_object(
    body: Mapping[str, Any],
    *,
    response_id: str,
    model: str,
    text: str,
    status: str = "completed",
) -> dict[str, Any]:
    """A ``response`` object with ``text`` as the assistant's one message."""
    output: list[dict[str, Any]] = []
    if status == "completed":
        output.append(
            {
                "type": "message",
                "id": f"msg_{response_id}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    words_in = len(echo_input(body).split())
    words_out = len(text.split())
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata") or {},
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"),
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": body.get("tools") or [],
        "top_p": 1.0,
        "usage": {
            "input_tokens": words_in,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": words_out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": words_in + words_out,
        },
    }


def stream_events(
    body: Mapping[str, Any], *, response_id: str, model: str, pieces: list[str]
) -> list[dict[str, Any]]:
    """The typed events of a streamed response whose text is ``pieces`` joined."""
    text = "".join(pieces)
    started = response_object(body, response_id=response_id, model=model, text="")
    started.update(status="in_progress", output=[], usage=None)
    item_id = f"msg_{response_id}"
    part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
    item: dict[str, Any] = {
        "type": "message",
        "id": item_id,
        "status": "in_progress",
        "role": "assistant",
        "content": [],
    }
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}
    done = response_object(body, response_id=response_id, model=model, text=text)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.content_part.added", **at, "part": part},
        *(
            {"type": "response.output_text.delta", **at, "delta": piece, "logprobs": []}
            for piece in pieces
        ),
        {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **at, "part": {**part, "text": text}},
        {"type": "response.output_item.done", "output_index": 0, "item": done["output"][0]},
        {"type": "response.completed", "response": done},
    ]
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return events


async def send_stream(
    request: web.Request, events: list[dict[str, Any]], config: MockConfig
) -> web.StreamResponse:
    """``events`` as ``event: <type>`` / ``data: <json>`` blocks."""
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    delay = config.stream_chunk_delay_ms / 1000.0
    try:
        for index, event in enumerate(events):
            if index and delay:
                await asyncio.sleep(delay)
            data = json.dumps(event, ensure_ascii=False)
            await response.write(f"event: {event['type']}\ndata: {data}\n\n".encode())
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away
    return response
