"""The memory processor of chat completions and Responses API calls: all of one
request's state, phase by phase.

request headers  -> decide whether this request is ours (path, method, identity)
request body     -> retrieve memories for the latest user message, inject, re-encode
response headers -> report the injected count; SSE switches the body to STREAMED
response body    -> reassemble the answer; at the end store the turn in the write journal

Every "not ours" decision is a pass-through with a counted reason; nothing here
logs message content unless ``debug_content`` is on.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from sidecar.config import Profile
from sidecar.errors import EmbeddingError, InvalidIdentifier, StoreError
from sidecar.extproc.chat_request import ChatRequest, ResponsesRequest
from sidecar.extproc.chat_response import (
    CompletionResult,
    StreamedCompletion,
    parse_completion_json,
)
from sidecar.extproc.identity import (
    Identity,
    blank_user_header,
    header_dict,
    identity_from_body,
    identity_from_headers,
    request_path,
)
from sidecar.extproc.processor import Processor
from sidecar.extproc.replies import (
    BodySendMode,
    error_reply,
    headers_reply,
    passthrough,
    replace_body,
)
from sidecar.extproc.responses_reply import StreamedResponse, parse_response_json
from sidecar.memory.language.sanitize import clean_turn
from sidecar.memory.read.deep.search import DeepReport
from sidecar.memory.read.pipeline import MemoryRequest, RequestPipeline
from sidecar.memory.read.rewrite.rewriter import RewriteResult
from sidecar.memory.records.records import now_ms
from sidecar.memory.records.turns import Turn
from sidecar.memory.write.turns.queue import WriteQueue
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

IDENTITY_ENCODINGS = ("", "identity")


def _json_content_type(value: str) -> bool:
    """No content type (lenient clients) or JSON: ``application/json``, ``*+json``."""
    media = value.split(";", 1)[0].strip().lower()
    return media in ("", "application/json") or media.endswith("+json")


class AnswerStream(Protocol):
    """A streamed answer being reassembled from its body's bytes."""

    def feed_bytes(self, chunk: bytes) -> None: ...
    def finish(self) -> None: ...
    @property
    def complete(self) -> bool: ...
    def result(self) -> CompletionResult: ...


@dataclass(frozen=True, slots=True)
class Api:
    """An endpoint family the memory logic understands: how its request body is
    read and injected into, and how its answer is read (JSON, or SSE events)."""

    name: str
    request: type[ChatRequest]
    answer: Callable[[bytes], CompletionResult | None]
    stream: Callable[[], AnswerStream]


CHAT = Api("chat", ChatRequest, parse_completion_json, StreamedCompletion)
RESPONSES = Api("responses", ResponsesRequest, parse_response_json, StreamedResponse)


@dataclass(frozen=True, slots=True)
class ChatDeps:
    """What every chat processor shares; built once at start-up."""

    #: The request path's front door: the memories to inject for a request.
    memory: RequestPipeline
    #: The write path's front door: finished turns go into its durable journal.
    queue: WriteQueue
    metrics: Metrics
    debug_content: bool = False


class ChatMemoryProcessor(Processor):
    def __init__(self, deps: ChatDeps, profile_name: str, profile: Profile) -> None:
        self._deps = deps
        self._metrics = deps.metrics
        self._profile_name = profile_name
        self._profile = profile
        self._active = False  # this request is a chat request we handle
        self._api = CHAT
        self._headers: dict[str, str] = {}
        self._identity: Identity | None = None
        self._request_id = ""
        self._user_text: str | None = None
        #: Where the user's message is in the request's messages (provenance).
        self._user_index = -1
        self._injected: int | None = None  # None: nothing attempted
        self._explained = False  # why the block was injected is kept (explain_last)
        self._rewrite: RewriteResult | None = None
        self._deep: DeepReport | None = None
        self._collect = False  # collect the response for extraction
        self._status = 0
        self._sse: AnswerStream | None = None
        self._buffer = bytearray()
        self._overflow = False

    # -- helpers -----------------------------------------------------------------------

    def _skip(self, reason: str) -> None:
        self._active = False
        self._metrics.passthrough.labels(reason=reason).inc()
        self._metrics.requests.labels(profile=self._profile_name, outcome="passthrough").inc()

    @property
    def _extraction_on(self) -> bool:
        return self._profile.extraction.enabled and self._identity is not None

    # -- request -----------------------------------------------------------------------

    async def request_headers(self, message: pb.HttpHeaders) -> pb.ProcessingResponse:
        headers = header_dict(message.headers)
        self._headers = headers
        self._request_id = headers.get("x-request-id", "")[:128]
        if not self._request_id and self._profile.injection.explain_last:
            self._request_id = uuid.uuid4().hex  # an explanation needs a name
        path = request_path(headers)
        if path in self._profile.responses_paths:
            self._api = RESPONSES
        if path not in self._profile.paths and path not in self._profile.responses_paths:
            self._skip("other_path")
        elif headers.get(":method", "").upper() != "POST" or message.end_of_stream:
            self._skip("no_body")
        elif headers.get("content-encoding", "").strip().lower() not in IDENTITY_ENCODINGS:
            self._skip("encoded_body")
        elif not _json_content_type(headers.get("content-type", "")):
            self._skip("not_json_content_type")
        else:
            try:
                self._identity = identity_from_headers(headers, self._profile.identity)
            except InvalidIdentifier:
                self._skip("invalid_identity")
                log.warning("invalid identity header request_id=%s", self._request_id)
            else:
                blank = blank_user_header(headers, self._profile.identity)
                if self._identity is None and (blank or not self._profile.identity.allow_body_user):
                    self._skip("no_identity")
                else:
                    self._active = True
                    if self._identity is not None and self._identity.groups_dropped:
                        self._metrics.groups_dropped.inc(self._identity.groups_dropped)
        return passthrough("request_headers")

    async def request_body(self, message: pb.HttpBody) -> pb.ProcessingResponse:
        if not self._active:
            return passthrough("request_body")
        if not message.end_of_stream:
            # Only BUFFERED bodies can be rewritten; a partial chunk passes through.
            self._skip("unbuffered_body")
            return passthrough("request_body")
        request = self._api.request.parse(message.body)
        if request is None:
            self._skip(f"not_{self._api.name}_json")
            return passthrough("request_body")
        if self._identity is None:
            body_user = request.body_user_id()
            if body_user is None:
                self._skip("no_identity")
                return passthrough("request_body")
            try:
                self._identity = identity_from_body(
                    body_user, self._headers, self._profile.identity
                )
            except InvalidIdentifier:
                self._skip("invalid_identity")
                return passthrough("request_body")
        self._user_text = request.latest_user_text()
        self._user_index = request.latest_user_index()
        if self._user_text is None:
            self._skip("no_user_message")
            return passthrough("request_body")
        self._collect = self._extraction_on
        if not self._profile.retrieval.enabled:
            self._metrics.requests.labels(profile=self._profile_name, outcome="no_retrieval").inc()
            return passthrough("request_body")
        return await self._inject(request, self._user_text, self._identity)

    async def _inject(
        self, request: ChatRequest, query: str, identity: Identity
    ) -> pb.ProcessingResponse:
        rewriting = self._profile.rewrite
        request_memory = MemoryRequest(
            text=query,
            history=request.history(rewriting.history_messages) if rewriting.enabled else [],
            scope=identity.scope,
            profile=self._profile,
            profile_name=self._profile_name,
            session_key=identity.session_id or identity.user_id,
            request_id=self._request_id,
        )
        try:
            found = await self._deps.memory.run(request_memory)
        except TimeoutError:
            self._metrics.passthrough.labels(reason="retrieval_timeout").inc()
            return self._memory_unavailable("retrieval_timeout")
        except (StoreError, EmbeddingError) as exc:
            self._metrics.passthrough.labels(reason="retrieval_error").inc()
            log.warning("retrieval failed: %s request_id=%s", type(exc).__name__, self._request_id)
            return self._memory_unavailable("retrieval_error")
        block, self._rewrite, self._deep = found.block, found.rewrite, found.deep
        if self._deps.debug_content and self._rewrite is not None and self._rewrite.changed:
            log.debug("rewrote request_id=%s query=%r", self._request_id, self._rewrite.query)
        self._injected = block.count
        self._explained = found.explained
        self._metrics.injected.observe(block.count)
        self._metrics.requests.labels(profile=self._profile_name, outcome="retrieved").inc()
        if self._deps.debug_content:
            log.debug("injecting request_id=%s block=%r", self._request_id, block.text)
        if not block.count:
            return passthrough("request_body")
        injection = self._profile.injection
        if injection.placement == "system":
            request.inject_system(block.text, injection.mode)
        elif injection.placement == "user":
            request.inject_into_latest_user(block.text)
        else:
            request.inject_before_latest_user(block.text, injection.role)
        return replace_body("request_body", request.encode())

    def _memory_unavailable(self, reason: str) -> pb.ProcessingResponse:
        self._injected = 0
        if self._profile.fail_open:
            self._metrics.fail_open.labels(reason=reason).inc()
            return passthrough("request_body")
        self._metrics.fail_closed.inc()
        return error_reply(503, "memory service unavailable", f"memory_{reason}")

    # -- response ----------------------------------------------------------------------

    async def response_headers(self, message: pb.HttpHeaders) -> pb.ProcessingResponse:
        headers = header_dict(message.headers)
        try:
            self._status = int(headers.get(":status", "0"))
        except ValueError:
            self._status = 0
        set_headers: dict[str, str] = {}
        header = self._profile.injection.response_header
        if header and self._injected is not None:
            set_headers[header] = str(self._injected)
        if self._explained and self._profile.injection.explain_header:
            set_headers[self._profile.injection.explain_header] = self._request_id
        if self._profile.injection.debug_headers:
            if self._rewrite is not None:
                set_headers["x-memory-rewrite"] = self._rewrite.header_value()
            if self._deep is not None:
                set_headers["x-memory-deep-search"] = self._deep.header_value()
        encoding = headers.get("content-encoding", "").strip().lower()
        if self._collect and (self._status != 200 or encoding not in IDENTITY_ENCODINGS):
            self._collect = False
            self._metrics.turns.labels(outcome="skipped_response").inc()
        if not self._collect:
            # Nothing to read: tell Envoy not to send the response body at all.
            return headers_reply(
                "response_headers", set_headers=set_headers, response_body_mode=BodySendMode.NONE
            )
        if headers.get("content-type", "").lower().startswith("text/event-stream"):
            # Stream chunk by chunk (time to first token); reassemble on the side.
            self._sse = self._api.stream()
            return headers_reply(
                "response_headers",
                set_headers=set_headers,
                remove=("content-length",),
                response_body_mode=BodySendMode.STREAMED,
            )
        return headers_reply("response_headers", set_headers=set_headers)

    async def response_body(self, message: pb.HttpBody) -> pb.ProcessingResponse:
        if self._collect and not self._overflow:
            self._buffer_chunk(message.body)
        if message.end_of_stream and self._collect:
            self._collect = False
            await self._finish_turn()
        return passthrough("response_body")

    def _buffer_chunk(self, chunk: bytes) -> None:
        if len(self._buffer) + len(chunk) > self._profile.max_response_bytes:
            self._overflow = True
            self._metrics.turns.labels(outcome="skipped_too_large").inc()
            return
        self._buffer.extend(chunk)
        if self._sse is not None:
            self._sse.feed_bytes(chunk)

    async def _finish_turn(self) -> None:
        """Hand the finished turn to the write queue. The last body phase awaits the
        durable append (one SQLite insert, on this thread while the file is free): once Envoy has
        this phase's reply, the turn survives a crash of the sidecar."""
        if self._overflow or self._identity is None or self._user_text is None:
            return
        if self._sse is not None:
            self._sse.finish()
            result = self._sse.result() if self._sse.complete else None
        else:
            result = self._api.answer(bytes(self._buffer))
        self._buffer.clear()
        if result is None or not result.text.strip():
            self._metrics.turns.labels(outcome="skipped_no_answer").inc()
            return
        # Cleaned (valid UTF-8: a JSON body may carry lone surrogates) and capped
        # before it is journaled: the journal holds no more than extraction reads.
        turn = Turn(
            user_id=self._identity.user_id,
            group_ids=self._identity.group_ids,
            user_text=self._user_text,
            assistant_text=result.text,
            created_at=now_ms(),
            request_id=self._request_id,
            profile=self._profile_name,
            session_id=self._identity.session_id,
            message_index=self._user_index,
        )
        await self._deps.queue.submit(clean_turn(turn, self._profile.extraction.max_turn_chars))

    def on_error(self, phase: str) -> pb.ProcessingResponse:
        if phase == "request_body" and self._active and not self._profile.fail_open:
            self._metrics.fail_closed.inc()
            return error_reply(503, "memory service unavailable", "memory_internal_error")
        if phase == "request_body" and self._active:
            self._metrics.fail_open.labels(reason="internal_error").inc()
        return passthrough(phase)

    def on_close(self) -> None:
        self._buffer.clear()
