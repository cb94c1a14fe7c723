"""Builders for ext_proc ProcessingRequest messages, as Envoy sends them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sidecar._proto.envoy.config.core.v3 import base_pb2
from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2 as pb


def header_map(headers: Mapping[str, str]) -> base_pb2.HeaderMap:
    return base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()]
    )


def request_headers(
    path: str = "/v1/chat/completions",
    *,
    user: str | None = "alice",
    groups: str | None = None,
    method: str = "POST",
    end_of_stream: bool = False,
    extra: Mapping[str, str] | None = None,
) -> pb.ProcessingRequest:
    headers = {":method": method, ":path": path, "content-type": "application/json"}
    if user is not None:
        headers["x-user-id"] = user
    if groups is not None:
        headers["x-user-groups"] = groups
    headers.update(extra or {})
    return pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(headers=header_map(headers), end_of_stream=end_of_stream)
    )


def chat_body(text: str = "Where do I live?", **extra: Any) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], **extra}
    return json.dumps(body).encode()


def request_body(body: bytes, *, end_of_stream: bool = True) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=end_of_stream))


def response_headers(
    *, status: int = 200, content_type: str = "application/json"
) -> pb.ProcessingRequest:
    headers = {":status": str(status), "content-type": content_type}
    return pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=header_map(headers)))


def response_body(body: bytes, *, end_of_stream: bool = True) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(response_body=pb.HttpBody(body=body, end_of_stream=end_of_stream))


def completion_json(text: str) -> bytes:
    return json.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()


def sse_chunks(text: str, pieces: int = 4) -> list[bytes]:
    words = text.split(" ")
    step = max(1, len(words) // pieces)
    parts = [" ".join(words[i : i + step]) for i in range(0, len(words), step)]
    chunks = []
    for i, part in enumerate(parts):
        delta = {"content": part + (" " if i < len(parts) - 1 else "")}
        if i == 0:
            delta["role"] = "assistant"
        chunk = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
        chunks.append(f"data: {json.dumps(chunk)}\n\n".encode())
    final = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    chunks.append(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
    return chunks


def header_values(mutation: pb.HeaderMutation) -> dict[str, str]:
    return {h.header.key: h.header.raw_value.decode() for h in mutation.set_headers}


def memory_message(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The message of a mutated chat body that carries the memory block, wherever
    the placement put it; ``None`` when there is none."""
    for message in body.get("messages", []):
        content = message.get("content") if isinstance(message, dict) else None
        texts = (
            [p.get("text", "") for p in content if isinstance(p, dict)]
            if isinstance(content, list)
            else [content if isinstance(content, str) else ""]
        )
        if any("<memory>" in text for text in texts):
            return message
    return None
