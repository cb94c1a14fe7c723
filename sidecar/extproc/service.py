"""The ext_proc gRPC servicer: one processor per stream, one reply per message.

The loop dispatches on the ``ProcessingRequest`` oneof and always answers with the
matching response type. Any exception inside a phase becomes the processor's
``on_error`` reply plus a counter and a log line (no content) — never a broken
stream. A cancelled stream (Envoy gave up or the client left) ends quietly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from sidecar._proto.envoy.service.ext_proc.v3 import (
    external_processor_pb2 as pb,
)
from sidecar._proto.envoy.service.ext_proc.v3 import (
    external_processor_pb2_grpc as pb_grpc,
)
from sidecar.config import SidecarConfig
from sidecar.extproc.chat import ChatDeps, ChatMemoryProcessor
from sidecar.extproc.identity import header_dict, request_path
from sidecar.extproc.processor import Processor
from sidecar.extproc.replies import PHASES
from sidecar.logs import REQUEST_ID, clean_request_id, new_request_id
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

#: A stream's processor from its gRPC metadata and its request path, without the
#: query string (None: the stream did not open with request headers).
ProcessorFactory = Callable[[Sequence[tuple[str, Any]], str | None], Processor]


class ProfileRouter:
    """Picks the processor for a stream from the profile Envoy names in the
    stream's gRPC metadata (set per route). Where the metadata names none (gateways
    that cannot set it per route: Envoy Gateway, Istio), the profile whose ``paths``
    or ``responses_paths`` list the request's path, else the default profile. An
    unknown profile passes through."""

    def __init__(self, config: SidecarConfig, deps: ChatDeps) -> None:
        self._config = config
        self._deps = deps
        self._key = config.server.profile_metadata_key
        #: The first profile (in the file's order) listing each path the default
        #: profile does not (profiles inherit the default's paths unless they set
        #: their own).
        default = config.profile(config.default_profile)
        served = {*default.paths, *default.responses_paths} if default is not None else set()
        self._by_path: dict[str, str] = {}
        for name, profile in config.profiles.items():
            for path in (*profile.paths, *profile.responses_paths):
                if path not in served:
                    self._by_path.setdefault(path, name)

    def __call__(self, metadata: Sequence[tuple[str, Any]], path: str | None = None) -> Processor:
        name: str | None = None
        for key, value in metadata:
            if key.lower() == self._key:
                name = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
                break
        if name is None:
            name = self._by_path.get(path or "", self._config.default_profile)
        profile = self._config.profile(name)
        if profile is None:
            self._deps.metrics.passthrough.labels(reason="unknown_profile").inc()
            log.warning("unknown memory profile %r; passing through", name[:64])
            return Processor()
        return ChatMemoryProcessor(self._deps, name, profile)


class ExternalProcessorService(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    def __init__(self, factory: ProcessorFactory, metrics: Metrics, *, debug: bool = False) -> None:
        self._factory = factory
        self._metrics = metrics
        self._debug = debug  # tracebacks may quote content: only with debug_content
        # Each phase's histogram child, resolved once (``labels()`` per message costs
        # a lock and a tuple).
        self._phase_seconds = {p: metrics.phase_seconds.labels(phase=p) for p in PHASES}

    async def Process(
        self, request_iterator: AsyncIterator[pb.ProcessingRequest], context: Any
    ) -> AsyncIterator[pb.ProcessingResponse]:
        self._metrics.streams.inc()
        # Every log line of this stream carries its request id: the context is the
        # stream's own (grpc.aio runs each call in a task of its own).
        REQUEST_ID.set(new_request_id())
        processor: Processor | None = None
        try:
            async for request in request_iterator:
                phase = request.WhichOneof("request")
                if processor is None:
                    path = None
                    if phase == "request_headers":
                        headers = header_dict(request.request_headers.headers)
                        REQUEST_ID.set(clean_request_id(headers.get("x-request-id")))
                        path = request_path(headers)
                    processor = self._factory(tuple(context.invocation_metadata() or ()), path)
                if phase not in PHASES:
                    log.warning("ext_proc message without a known phase: %s", phase)
                    continue
                started = time.perf_counter()
                try:
                    reply = await getattr(processor, phase)(getattr(request, phase))
                except Exception as exc:  # the one place any failure becomes a pass-through
                    self._metrics.errors.labels(phase=phase).inc()
                    log.error(
                        "processor failed in %s: %s; passing through",
                        phase,
                        type(exc).__name__,
                        exc_info=self._debug,
                    )
                    reply = processor.on_error(phase)
                self._phase_seconds[phase].observe(time.perf_counter() - started)
                yield reply
                if reply.HasField("immediate_response"):
                    return
        finally:
            if processor is not None:
                processor.on_close()
