"""Reassembles one completion (JSON or SSE) and hands the finished turn to the write
queue. Used by the inline response path (the memory processor's own response
phases) and by the response observer alike."""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.config import Profile
from sidecar.extproc.completion import StreamedCompletion, parse_completion_json
from sidecar.extproc.turn_context import TurnContext
from sidecar.memory.queue import WriteQueue
from sidecar.memory.sanitize import clean_turn
from sidecar.metrics import Metrics

IDENTITY_ENCODINGS = ("", "identity")


class TurnCollector:
    """One response's body, chunk by chunk, up to ``profile.max_response_bytes``."""

    def __init__(
        self,
        queue: WriteQueue,
        metrics: Metrics,
        profile_name: str,
        profile: Profile,
        context: TurnContext,
    ) -> None:
        self._queue = queue
        self._metrics = metrics
        self._profile_name = profile_name
        self._profile = profile
        self._context = context
        self._sse: StreamedCompletion | None = None
        self._buffer = bytearray()
        self._overflow = False

    @property
    def streamed(self) -> bool:
        """The response is an SSE stream (known after :meth:`accept`)."""
        return self._sse is not None

    def accept(self, headers: Mapping[str, str]) -> bool:
        """Whether the response with these headers can hold an answer to read: a 200
        with an identity encoding. A refused one is counted."""
        encoding = headers.get("content-encoding", "").strip().lower()
        if headers.get(":status", "").strip() != "200" or encoding not in IDENTITY_ENCODINGS:
            self._metrics.turns.labels(outcome="skipped_response").inc()
            return False
        if headers.get("content-type", "").lower().startswith("text/event-stream"):
            self._sse = StreamedCompletion()
        return True

    def feed(self, chunk: bytes) -> None:
        if self._overflow:
            return
        if len(self._buffer) + len(chunk) > self._profile.max_response_bytes:
            self._overflow = True
            self._buffer.clear()
            self._metrics.turns.labels(outcome="skipped_too_large").inc()
            return
        self._buffer.extend(chunk)
        if self._sse is not None:
            self._sse.feed_bytes(chunk)

    async def finish(self) -> None:
        """The body is complete: parse the answer and submit the turn. Awaits the
        durable append (one SQLite insert, on the journal's thread)."""
        if self._overflow:
            return
        if self._sse is not None:
            self._sse.finish()
            result = self._sse.result() if self._sse.complete else None
        else:
            result = parse_completion_json(bytes(self._buffer))
        self._buffer.clear()
        if result is None or not result.text.strip():
            self._metrics.turns.labels(outcome="skipped_no_answer").inc()
            return
        # Cleaned (valid UTF-8: a JSON body may carry lone surrogates) and capped
        # before it is journaled: the journal holds no more than extraction reads.
        turn = self._context.turn(result.text, self._profile_name)
        await self._queue.submit(clean_turn(turn, self._profile.extraction.max_turn_chars))

    def close(self) -> None:
        self._buffer.clear()
