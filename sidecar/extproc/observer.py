"""The response observer: the response half of a turn with ``envoy.response_path:
observe``.

Envoy's second ext_proc filter runs in observability mode: it sends the response
headers and every body chunk here and forwards them to the client without waiting
for a reply (the service sends none). The turn's request half arrives with each
message as dynamic metadata, set by the memory processor's request-body reply
(:mod:`sidecar.extproc.turn_context`). A response without it — not a chat turn,
extraction off, a request the memory filter passed through — is ignored.
"""

from __future__ import annotations

from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from sidecar.config import Profile
from sidecar.extproc.identity import header_dict
from sidecar.extproc.processor import Processor
from sidecar.extproc.responses import passthrough
from sidecar.extproc.turn_collector import TurnCollector
from sidecar.extproc.turn_context import TurnContext
from sidecar.memory.queue import WriteQueue
from sidecar.metrics import Metrics


class ResponseObserver(Processor):
    def __init__(
        self,
        queue: WriteQueue,
        metrics: Metrics,
        profile_name: str,
        profile: Profile,
        context: TurnContext | None,
    ) -> None:
        self._collector = (
            None
            if context is None or not profile.extraction.enabled
            else TurnCollector(queue, metrics, profile_name, profile, context)
        )
        self._accepted = False

    async def response_headers(self, message: pb.HttpHeaders) -> pb.ProcessingResponse:
        if self._collector is not None:
            self._accepted = self._collector.accept(header_dict(message.headers))
        return passthrough("response_headers")

    async def response_body(self, message: pb.HttpBody) -> pb.ProcessingResponse:
        collector = self._collector
        if collector is not None and self._accepted:
            collector.feed(message.body)
            if message.end_of_stream:
                self._collector = None
                await collector.finish()
        return passthrough("response_body")

    def on_close(self) -> None:
        if self._collector is not None:
            self._collector.close()
