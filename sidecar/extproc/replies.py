"""Builders for ext_proc ``ProcessingResponse`` messages.

Every phase has a pass-through reply; mutations are built here so that the rest of
the package never touches the protobuf field layout.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from sidecar._proto.envoy.config.core.v3 import base_pb2
from sidecar._proto.envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from sidecar._proto.envoy.type.v3 import http_status_pb2

BodySendMode = processing_mode_pb2.ProcessingMode.BodySendMode

#: The ProcessingRequest oneof names, which are also the ProcessingResponse ones.
PHASES = (
    "request_headers",
    "request_body",
    "request_trailers",
    "response_headers",
    "response_body",
    "response_trailers",
)


def header_mutation(
    set_headers: Mapping[str, str] | None = None, remove: Iterable[str] = ()
) -> pb.HeaderMutation:
    mutation = pb.HeaderMutation(remove_headers=list(remove))
    for key, value in (set_headers or {}).items():
        mutation.set_headers.append(
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=key, raw_value=value.encode("utf-8")),
                append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
            )
        )
    return mutation


def passthrough(phase: str) -> pb.ProcessingResponse:
    """The reply that lets ``phase`` continue unchanged."""
    if phase in ("request_headers", "response_headers"):
        return pb.ProcessingResponse(**{phase: pb.HeadersResponse()})
    if phase in ("request_body", "response_body"):
        return pb.ProcessingResponse(**{phase: pb.BodyResponse()})
    if phase in ("request_trailers", "response_trailers"):
        return pb.ProcessingResponse(**{phase: pb.TrailersResponse()})
    raise ValueError(f"unknown ext_proc phase {phase!r}")


def headers_reply(
    phase: str,
    *,
    set_headers: Mapping[str, str] | None = None,
    remove: Iterable[str] = (),
    response_body_mode: int | None = None,
) -> pb.ProcessingResponse:
    """A headers-phase reply with optional header changes and a body-mode override."""
    common = pb.CommonResponse(header_mutation=header_mutation(set_headers, remove))
    reply = pb.ProcessingResponse(**{phase: pb.HeadersResponse(response=common)})
    if response_body_mode is not None:
        reply.mode_override.response_body_mode = response_body_mode  # type: ignore[assignment]
    return reply


def replace_body(phase: str, body: bytes) -> pb.ProcessingResponse:
    """Replace a buffered body; ``content-length`` follows (Envoy rejects a mismatch)."""
    common = pb.CommonResponse(
        header_mutation=header_mutation({"content-length": str(len(body))}),
        body_mutation=pb.BodyMutation(body=body),
    )
    return pb.ProcessingResponse(**{phase: pb.BodyResponse(response=common)})


def error_reply(status: int, message: str, error_type: str) -> pb.ProcessingResponse:
    """Answer the client directly with an OpenAI-style JSON error."""
    body = json.dumps({"error": {"message": message, "type": error_type, "code": status}})
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=status),  # type: ignore[arg-type]
            headers=header_mutation({"content-type": "application/json"}),
            body=body.encode("utf-8"),
            details=error_type,
        )
    )
