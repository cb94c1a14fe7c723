"""Hypothesis fuzzing of the ext_proc state machine: random phase orders, random
bodies and headers, >= 10,000 cases through the real server loop
(``ExternalProcessorService.Process``) and the real memory service.

Properties: one reply per message, of the matching type (until an immediate
response ends the stream); never an exception; every body mutation is valid JSON
with a matching content-length; no internal error is ever counted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from sidecar.extproc.chat import ChatDeps
from sidecar.extproc.service import ExternalProcessorService, ProfileRouter
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.turns import Turn
from sidecar.runtime.components import Components
from tests.extproc import messages as msg
from tests.support.boot import sidecar_config

CASES = 10_000

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
#: Any code point, lone surrogates included: valid JSON (escaped) that no UTF-8
#: encoder takes once parsed.
any_text = st.text(st.characters(exclude_categories=()), max_size=80)
content = st.one_of(
    st.text(max_size=80),
    any_text,
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=40)}),
            st.fixed_dictionaries(
                {
                    "type": st.just("image_url"),
                    "image_url": st.fixed_dictionaries({"url": st.text(max_size=10)}),
                }
            ),
            json_values,
        ),
        max_size=3,
    ),
    json_values,
)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "system", "assistant", "developer", "tool", "x"]),
        "content": content,
    },
    optional={"tool_calls": st.lists(json_values, max_size=2), "name": st.text(max_size=5)},
)
chat_body = st.fixed_dictionaries(
    {"messages": st.lists(message, max_size=5)},
    optional={
        "model": st.text(max_size=10),
        "stream": st.booleans(),
        "user": st.text(max_size=12),
        "tools": st.lists(json_values, max_size=2),
        "metadata": st.dictionaries(st.text(max_size=8), json_values, max_size=2),
    },
).map(lambda b: json.dumps(b).encode())
responses_body = st.fixed_dictionaries(
    {
        "input": st.one_of(
            st.text(max_size=20), st.lists(st.one_of(message, json_values), max_size=5)
        )
    },
    optional={"instructions": st.text(max_size=10), "stream": st.booleans()},
).map(lambda b: json.dumps(b).encode())
RESPONSE_EVENTS = (
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"Ok"}'
    b'\n\nevent: response.completed\ndata: {"type":"response.completed","response":'
    b'{"status":"completed","output":[{"type":"message","role":"assistant","content":'
    b'[{"type":"output_text","text":"Ok"}]}]}}\n\n'
)
bodies = st.one_of(
    chat_body,
    responses_body,
    chat_body.map(lambda b: b[: len(b) // 2]),  # truncated
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.just(b""),
    st.just(b'{"messages":[{"role":"user","content":"\\ud800 caf\\u00e9"}],"x":1e400}'),
)
header_value = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["alice", 'x" || user_id != "y', "bad\x01id", " ", "a" * 300]),
)


def request_headers(data: st.DataObject) -> pb.ProcessingRequest:
    extra = {}
    if data.draw(st.booleans()):
        extra["content-encoding"] = data.draw(st.sampled_from(["gzip", "identity", "br", ""]))
    if data.draw(st.booleans()):
        extra["x-user-groups"] = data.draw(header_value)
    if data.draw(st.booleans()):
        extra["x-session-id"] = data.draw(header_value)
    user = data.draw(st.one_of(st.none(), header_value))
    path = data.draw(
        st.sampled_from(
            [
                "/v1/chat/completions",
                "/v1/chat/completions?x=1",
                "/v1/responses",
                "/v1/embeddings",
                "/",
                "",
            ]
        )
    )
    method = data.draw(st.sampled_from(["POST", "GET", "post", "PUT"]))
    try:
        return msg.request_headers(
            path, user=user, method=method, end_of_stream=data.draw(st.booleans()), extra=extra
        )
    except (UnicodeEncodeError, ValueError):
        return msg.request_headers(path, user="alice", method=method)


def phase(data: st.DataObject) -> pb.ProcessingRequest:
    kind = data.draw(
        st.sampled_from(
            [
                "request_headers",
                "request_body",
                "response_headers",
                "response_body",
                "request_trailers",
                "response_trailers",
            ]
        )
    )
    if kind == "request_headers":
        return request_headers(data)
    if kind == "request_body":
        return msg.request_body(data.draw(bodies), end_of_stream=data.draw(st.booleans()))
    if kind == "response_headers":
        return msg.response_headers(
            status=data.draw(st.sampled_from([200, 200, 500, 429])),
            content_type=data.draw(
                st.sampled_from(["application/json", "text/event-stream", "text/plain", ""])
            ),
        )
    if kind == "response_body":
        body = data.draw(
            st.one_of(
                st.binary(max_size=200),
                st.just(msg.completion_json("Okay.")),
                st.sampled_from(msg.sse_chunks("Sure thing, noted.")),
                st.just(RESPONSE_EVENTS),
                st.just(RESPONSE_EVENTS[: len(RESPONSE_EVENTS) // 3]),
            )
        )
        return msg.response_body(body, end_of_stream=data.draw(st.booleans()))
    if kind == "request_trailers":
        return pb.ProcessingRequest(request_trailers=pb.HttpTrailers())
    return pb.ProcessingRequest(response_trailers=pb.HttpTrailers())


class Context:
    def __init__(self, profile: str | None) -> None:
        self._profile = profile

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("x-memory-profile", self._profile),) if self._profile else ()


@pytest.fixture(scope="module")
async def service(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
) -> AsyncIterator[tuple[ExternalProcessorService, Components]]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    config = sidecar_config(
        tmp,
        hierarchy={"schedule_s": 0},
        write_queue={"workers": 1},
        profiles={
            "closed": {"fail_open": False},
            "bodyuser": {"identity": {"allow_body_user": True}},
        },
    )
    components = await Components.build(config, embedder=embedder)
    await components.write.queue.start()
    await components.write.writer.write_turn(
        Turn(user_id="alice", user_text="I live in Berlin.", assistant_text="ok", created_at=1)
    )
    deps = ChatDeps(
        memory=components.read.pipeline, queue=components.write.queue, metrics=components.metrics
    )
    yield ExternalProcessorService(ProfileRouter(config, deps), components.metrics), components
    await components.close()


async def drive(
    service: ExternalProcessorService, requests: list[pb.ProcessingRequest], profile: str | None
) -> list[pb.ProcessingResponse]:
    async def source() -> AsyncIterator[pb.ProcessingRequest]:
        for request in requests:
            yield request

    return [reply async for reply in service.Process(source(), Context(profile))]


def check(requests: list[pb.ProcessingRequest], replies: list[pb.ProcessingResponse]) -> None:
    for request, reply in zip(requests, replies, strict=False):
        kind = reply.WhichOneof("response")
        if kind == "immediate_response":
            assert reply is replies[-1]
            json.loads(reply.immediate_response.body)
            return
        assert kind == request.WhichOneof("request")
        if kind == "request_body" and reply.request_body.response.HasField("body_mutation"):
            body = reply.request_body.response.body_mutation.body
            json.loads(body)
            lengths = msg.header_values(reply.request_body.response.header_mutation)
            assert lengths["content-length"] == str(len(body))
    assert len(replies) == len(requests)


async def test_random_phase_orders_and_bodies(
    service: tuple[ExternalProcessorService, Components],
) -> None:
    """Hypothesis runs in a worker thread; each example is driven on this loop."""
    server, components = service
    loop = asyncio.get_running_loop()

    @settings(
        max_examples=CASES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def run(data: st.DataObject) -> None:
        ordered = data.draw(st.booleans())
        if ordered:  # a plausible Envoy sequence with random contents
            requests = [request_headers(data), msg.request_body(data.draw(bodies))]
            requests += [phase(data) for _ in range(data.draw(st.integers(0, 3)))]
        else:
            requests = [phase(data) for _ in range(data.draw(st.integers(1, 6)))]
        profile = data.draw(st.sampled_from([None, "default", "closed", "bodyuser", "nope"]))
        future = asyncio.run_coroutine_threadsafe(drive(server, requests, profile), loop)
        check(requests, future.result(timeout=30))

    await asyncio.to_thread(run)
    errors = sum(
        components.metrics.value("memory_sidecar_processor_errors_total", {"phase": p})
        for p in ("request_headers", "request_body", "response_headers", "response_body",
                  "request_trailers", "response_trailers")
    )  # fmt: skip
    assert errors == 0
    # Client text (lone surrogates included) is bad input, never a retrieval failure.
    assert (
        components.metrics.value("memory_sidecar_fail_open_total", {"reason": "retrieval_error"})
        == 0
    )
    assert components.metrics.value("memory_sidecar_fail_closed_total") == 0
