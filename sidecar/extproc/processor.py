"""The processor contract: one object per ext_proc stream, one method per phase.

A concrete processor overrides only the phases it changes; everything else passes
through. The server loop calls :meth:`Processor.on_error` when a phase raises, so
a bug can never break the stream: the reply is a pass-through (or, for a
fail-closed profile, an error to the client).
"""

from __future__ import annotations

from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from sidecar.extproc.replies import passthrough


class Processor:
    """Pass-through for every phase."""

    async def request_headers(self, message: pb.HttpHeaders) -> pb.ProcessingResponse:
        return passthrough("request_headers")

    async def request_body(self, message: pb.HttpBody) -> pb.ProcessingResponse:
        return passthrough("request_body")

    async def request_trailers(self, message: pb.HttpTrailers) -> pb.ProcessingResponse:
        return passthrough("request_trailers")

    async def response_headers(self, message: pb.HttpHeaders) -> pb.ProcessingResponse:
        return passthrough("response_headers")

    async def response_body(self, message: pb.HttpBody) -> pb.ProcessingResponse:
        return passthrough("response_body")

    async def response_trailers(self, message: pb.HttpTrailers) -> pb.ProcessingResponse:
        return passthrough("response_trailers")

    def on_error(self, phase: str) -> pb.ProcessingResponse:
        """The reply for ``phase`` after it raised."""
        return passthrough(phase)

    def on_close(self) -> None:
        """The stream ended (completed, cancelled or failed)."""
