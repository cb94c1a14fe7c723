"""Identity headers that cannot be trusted, through the real Envoy: not UTF-8,
repeated, or holding a comma (which an intermediary may have produced by folding
two header lines into one). Each passes through byte-identical, without memory,
with a counted reason; none reaches anyone's memories."""

from __future__ import annotations

import base64
import http.client
import json
import uuid
from collections.abc import Iterator

import pytest

from e2e.stack import Stack, running_stack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("identity-headers")) as running:
        yield running


def chat(text: str) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()


def post(stack: Stack, body: bytes, headers: list[tuple[str, bytes]]) -> tuple[int, set[str]]:
    """POST with raw header lines (repeats and non-UTF-8 bytes allowed); the status
    and the response's header names."""
    connection = http.client.HTTPConnection("127.0.0.1", stack.ports.envoy, timeout=60)
    try:
        connection.putrequest("POST", "/v1/chat/completions")
        for name, value in [("content-type", b"application/json"), *headers]:
            connection.putheader(name, value)
        connection.putheader("content-length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        response.read()
        return response.status, {name.lower() for name, _ in response.getheaders()}
    finally:
        connection.close()


def upstream_bodies(stack: Stack, marker: str) -> list[bytes]:
    """The raw bodies of client requests (not the sidecar's own LLM calls) that the
    upstream received with ``marker`` in them."""
    clients = (r for r in stack.mock_requests() if "x-user-id" in r["headers"])
    bodies = (base64.b64decode(r["raw_body_b64"]) for r in clients)
    return [body for body in bodies if marker.encode() in body]


@pytest.mark.parametrize(
    "headers",
    [
        [("x-user-id", b"caf\xe9")],  # Latin-1, not UTF-8
        [("x-user-id", b"alice"), ("x-user-id", b"mallory")],
        [("x-user-id", b"alice,mallory")],
        [("x-user-id", b"alice"), ("x-session-id", b"s1,s2")],
    ],
    ids=["not-utf8", "repeated", "comma", "session-comma"],
)
def test_untrusted_identity_headers_pass_through_unchanged(
    stack: Stack, headers: list[tuple[str, bytes]]
) -> None:
    before = stack.sidecar_metric(
        "memory_sidecar_passthrough_total", {"reason": "invalid_identity"}
    )
    marker = uuid.uuid4().hex
    body = chat(f"Where do I live? {marker}")
    status, response_headers = post(stack, body, headers)
    assert status == 200
    assert "x-memory-injected" not in response_headers
    assert upstream_bodies(stack, marker) == [body]
    after = stack.sidecar_metric("memory_sidecar_passthrough_total", {"reason": "invalid_identity"})
    assert after == before + 1
