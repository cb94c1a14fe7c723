"""One chat request through a running processor, as Envoy sends it."""

from __future__ import annotations

import json

import grpc

from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from tests.extproc import messages as msg


async def injected_block(channel: grpc.aio.Channel, profile: str, question: str, user: str) -> str:
    """The first message of the body the processor sends upstream for ``question``
    asked by ``user`` on ``profile`` (the memory block, when it injected one); ""
    when it left the body as it was."""
    stub = pb_grpc.ExternalProcessorStub(channel)
    call = stub.Process(metadata=(("x-memory-profile", profile),))
    await call.write(msg.request_headers(user=user))
    await call.read()
    await call.write(msg.request_body(msg.chat_body(question)))
    reply = await call.read()
    await call.done_writing()
    mutation = reply.request_body.response.body_mutation.body
    if not mutation:
        return ""
    return str(json.loads(mutation)["messages"][0]["content"])
