"""The Responses API (``/v1/responses``): its body read and injected into, its answer
read from JSON and from typed SSE events, and one call through an in-process
gRPC sidecar each way."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from sidecar.extproc.chat_request import ChatRequest, ResponsesRequest
from sidecar.extproc.responses_reply import StreamedResponse, parse_response_json
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.runtime.server import Sidecar
from tests.extproc import messages as msg
from tests.extproc.test_service_grpc import exchange, mutated_body, new_user
from tests.support.boot import running_sidecar, sidecar_config

ITEMS: list[Any] = [
    {"role": "user", "content": "Hi"},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "done"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Where?"}]},
]


def body(**fields: Any) -> bytes:
    return json.dumps({"model": "m", **fields}).encode()


# -- the request body -------------------------------------------------------------------


def test_string_input_is_one_user_message() -> None:
    request = ResponsesRequest.parse(body(input="Where do I live?", instructions="Be brief."))
    assert request is not None
    assert request.latest_user_text() == "Where do I live?"
    request.inject_before_latest_user("MEMORY", "system")
    sent = json.loads(request.encode())
    assert sent["instructions"] == "Be brief."
    assert sent["input"] == [
        {"role": "system", "content": "MEMORY"},
        {"role": "user", "content": "Where do I live?"},
    ]


def test_the_block_goes_before_the_latest_user_item_and_every_other_byte_stays() -> None:
    raw = (
        b'{"model": "m",  "instructions": "Be\\u0020brief.", "temperature": 0.50, '
        b'"input": ' + json.dumps(ITEMS).encode() + b', "previous_response_id": "resp_1"}'
    )
    request = ResponsesRequest.parse(raw)
    assert request is not None
    assert request.latest_user_text() == "Where?"
    assert request.latest_user_index() == 3
    assert request.history(10) == [("user", "Hi")]
    request.inject_before_latest_user("MEMORY", "developer")
    sent = request.encode()
    head = raw[: raw.index(b'{"type": "message"')]
    assert sent.startswith(head)  # instructions, temperature, earlier items: as sent
    assert sent.endswith(b', "previous_response_id": "resp_1"}')
    assert json.loads(sent)["input"][3] == {"role": "developer", "content": "MEMORY"}


def test_user_and_system_placements_work_on_input_items() -> None:
    request = ResponsesRequest.parse(body(input=ITEMS))
    assert request is not None
    request.inject_into_latest_user("MEMORY")
    assert json.loads(request.encode())["input"][3]["content"][0] == {
        "type": "text",
        "text": "MEMORY",
    }
    request = ResponsesRequest.parse(body(input=ITEMS, instructions="Keep me."))
    assert request is not None
    request.inject_system("MEMORY", "append")
    sent = json.loads(request.encode())
    assert sent["instructions"] == "Keep me."  # never rewritten
    assert sent["input"][0] == {"role": "system", "content": "MEMORY"}


@pytest.mark.parametrize(
    "raw",
    [
        body(messages=[{"role": "user", "content": "x"}]),
        body(input=7),
        b"[1, 2]",
        b"not json",
        body(),
    ],
)
def test_what_is_not_a_responses_body_is_refused(raw: bytes) -> None:
    assert ResponsesRequest.parse(raw) is None


def test_a_chat_body_is_still_read_by_messages_only() -> None:
    assert ChatRequest.parse(body(input="x")) is None
    chat = ChatRequest.parse(msg.chat_body("Hi"))
    assert chat is not None
    assert not isinstance(chat, ResponsesRequest)


def test_an_item_without_text_has_no_user_message() -> None:
    request = ResponsesRequest.parse(body(input=[{"role": "user", "content": []}]))
    assert request is not None
    assert request.latest_user_text() is None


# -- the answer -------------------------------------------------------------------------


def response(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "m",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            },
        ],
        **fields,
    }


def test_a_json_answer_is_its_output_text() -> None:
    result = parse_response_json(json.dumps(response("Bergen.")).encode())
    assert result is not None
    assert result.text == "Bergen."
    assert result.model == "m"
    assert not result.has_tool_calls


@pytest.mark.parametrize(
    "doc",
    [
        response("x", status="failed"),
        response("x", status="cancelled"),
        response("x", error={"message": "boom"}),
        {"error": {"message": "bad request"}},
        {"object": "chat.completion", "choices": []},
    ],
)
def test_a_failed_or_foreign_json_body_has_no_answer(doc: dict[str, Any]) -> None:
    assert parse_response_json(json.dumps(doc).encode()) is None


def test_a_tool_call_is_marked() -> None:
    doc = response("")
    doc["output"] = [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]
    result = parse_response_json(json.dumps(doc).encode())
    assert result is not None
    assert result.has_tool_calls
    assert result.text == ""


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def delta(text: str) -> dict[str, Any]:
    return {"type": "response.output_text.delta", "item_id": "m", "delta": text}


def test_a_stream_is_reassembled_across_chunk_boundaries() -> None:
    raw = sse(
        {"type": "response.created", "response": response("", status="in_progress")},
        delta("Ber"),
        delta("gen."),
        {"type": "response.completed", "response": response("Bergen.")},
    )
    stream = StreamedResponse()
    for at in range(0, len(raw), 7):
        stream.feed_bytes(raw[at : at + 7])
    stream.finish()
    assert stream.complete
    assert stream.result().text == "Bergen."
    assert "Bergen" not in repr(stream)


def test_deltas_serve_when_the_final_event_has_no_output() -> None:
    final = response("")
    final["output"] = []
    stream = StreamedResponse()
    stream.feed_bytes(
        sse(delta("Hi "), delta("there"), {"type": "response.completed", "response": final})
    )
    stream.finish()
    assert stream.complete
    assert stream.result().text == "Hi there"


@pytest.mark.parametrize(
    "end",
    [
        {"type": "response.failed", "response": response("", status="failed")},
        {"type": "error", "message": "overloaded"},
        None,  # the stream broke off
    ],
)
def test_a_stream_that_failed_or_never_completed_has_no_answer(end: dict[str, Any] | None) -> None:
    stream = StreamedResponse()
    stream.feed_bytes(sse(delta("Half an ans"), *([end] if end else [])))
    stream.feed_bytes(b"data: {not json}\n\n")
    stream.finish()
    assert not stream.complete


# -- through the processor (in-process gRPC) ---------------------------------------------


@pytest.fixture(scope="module")
async def sidecar(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
) -> AsyncIterator[Sidecar]:
    config = sidecar_config(tmp_path_factory.mktemp("responses"))
    async with running_sidecar(config, embedder) as server:
        yield server


async def test_a_responses_call_is_injected(sidecar: Sidecar, channel: grpc.aio.Channel) -> None:
    user = new_user()
    turn = Turn(user_id=user, user_text="I live in Bergen.", assistant_text="Noted.", created_at=1)
    await sidecar.components.write.writer.write_turn(turn)
    replies = await exchange(
        channel,
        [
            msg.request_headers("/v1/responses", user=user),
            msg.request_body(body(input="Where do I live?", instructions="Be brief.")),
        ],
    )
    sent = mutated_body(replies[1])
    assert sent["instructions"] == "Be brief."
    assert "User lives in Bergen." in sent["input"][0]["content"]
    assert sent["input"][1] == {"role": "user", "content": "Where do I live?"}


async def test_a_streamed_responses_answer_is_remembered(
    sidecar: Sidecar, channel: grpc.aio.Channel
) -> None:
    user = new_user()
    raw = sse(
        delta("Noted, "),
        delta("Ana."),
        {"type": "response.completed", "response": response("Noted, Ana.")},
    )
    requests = [
        msg.request_headers("/v1/responses", user=user),
        msg.request_body(body(input="My sister's name is Ana.", stream=True)),
        msg.response_headers(content_type="text/event-stream"),
        *(
            msg.response_body(raw[at : at + 50], end_of_stream=False)
            for at in range(0, len(raw), 50)
        ),
        msg.response_body(b"", end_of_stream=True),
    ]
    await exchange(channel, requests)
    assert await sidecar.components.write.queue.wait_idle(10)
    rows = await sidecar.components.store.query(build_filter(owner=user))
    assert [r.content for r in rows] == ["User's sister's name is Ana."]


async def test_a_path_of_neither_api_passes_through_counted(
    sidecar: Sidecar, channel: grpc.aio.Channel
) -> None:
    metrics, other = sidecar.components.metrics, {"reason": "other_path"}
    before = metrics.value("memory_sidecar_passthrough_total", other)
    replies = await exchange(
        channel,
        [
            msg.request_headers("/v1/completions", user=new_user()),
            msg.request_body(body(prompt="x")),
        ],
    )
    assert not replies[1].request_body.response.HasField("body_mutation")
    assert metrics.value("memory_sidecar_passthrough_total", other) == before + 1
