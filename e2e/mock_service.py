"""The mock LLM's HTTP service: its aiohttp routes and the state they share.

:class:`MockLLMService` answers ``/v1/chat/completions`` (JSON or SSE; an echo, or
the registered task answer for a tagged prompt, with the configured latency,
faults and decorations), ``/v1/models``, ``/health`` and the ``/_mock/*`` control
routes, and owns the mutable state (config, seeded RNG, request record, counters).
:func:`build_app` wraps it in an application; starting and stopping one is
:mod:`e2e.mock_llm`'s job.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import itertools
import json
import logging
import random
import re
import time
from collections import deque
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from aiohttp import web

from e2e.mock_config import MockConfig
from e2e.mock_extract import handle_extract
from e2e.mock_judge import handle_dedup
from e2e.mock_protocol import (
    TaskHandler,
    build_echo,
    flatten_content,
    parse_task_tag,
    request_messages,
)
from e2e.mock_responses import echo_input, response_object, send_stream, stream_events
from e2e.mock_search import handle_rank, handle_rewrite

log = logging.getLogger("e2e.mock_llm")

GARBAGE_TEXT: Final = "Sure! Here are the results you asked for: {facts: [oops, this is not JSON"

DEFAULT_TASK_HANDLERS: Final[Mapping[str, TaskHandler]] = MappingProxyType(
    {
        "extract": handle_extract,
        "dedup": handle_dedup,
        "rewrite": handle_rewrite,
        "rank": handle_rank,
    }
)
"""Task name -> handler.  Add new sidecar tasks (rewrite, dedup, rank) here."""


# ---------------------------------------------------------------------------
# The service (all mutable state lives here, owned by the app)
# ---------------------------------------------------------------------------


class MockLLMService:
    """Request handlers plus the state they share: config, RNG, record, counters."""

    def __init__(
        self,
        config: MockConfig | None = None,
        *,
        task_handlers: Mapping[str, TaskHandler] | None = None,
    ) -> None:
        self.initial_config = config if config is not None else MockConfig()
        self.initial_config.validate()
        self.config = dataclasses.replace(self.initial_config)
        self.task_handlers: dict[str, TaskHandler] = dict(
            DEFAULT_TASK_HANDLERS if task_handlers is None else task_handlers
        )
        self.rng = random.Random(self.config.seed)
        self.recorded: deque[dict[str, Any]] = deque(maxlen=self.config.max_requests)
        self.stats: dict[str, Any] = self._zero_stats()
        self.started = int(time.time())
        self._ids = itertools.count(1)

    # -- state ----------------------------------------------------------------

    @staticmethod
    def _zero_stats() -> dict[str, Any]:
        return {"chat": 0, "responses": 0, "echo": 0, "stream": 0, "tasks": {}, "errors": 0}

    def configure(self, changes: Mapping[str, Any]) -> MockConfig:
        """Apply a partial config update (validated); returns the new config."""
        new = self.config.updated(changes)
        if "seed" in changes:
            self.rng = random.Random(new.seed)
        if new.max_requests != self.recorded.maxlen:
            self.recorded = deque(self.recorded, maxlen=new.max_requests)
        self.config = new
        return new

    def reset(self) -> None:
        """Back to the initial config; empty record; zero counters; fresh RNG."""
        self.config = dataclasses.replace(self.initial_config)
        self.rng = random.Random(self.config.seed)
        self.recorded = deque(maxlen=self.config.max_requests)
        self.stats = self._zero_stats()

    def requests(self) -> list[dict[str, Any]]:
        return list(self.recorded)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/_mock/requests", self.get_requests)
        app.router.add_delete("/_mock/requests", self.clear_requests)
        app.router.add_get("/_mock/config", self.get_config)
        app.router.add_post("/_mock/config", self.post_config)
        app.router.add_get("/_mock/stats", self.get_stats)
        app.router.add_delete("/_mock/stats", self.clear_stats)
        app.router.add_post("/_mock/reset", self.post_reset)

    # -- small routes -----------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def models(self, request: web.Request) -> web.Response:
        model = {
            "id": self.config.model,
            "object": "model",
            "created": self.started,
            "owned_by": "mock-llm",
        }
        return web.json_response({"object": "list", "data": [model]})

    async def get_requests(self, request: web.Request) -> web.Response:
        return web.json_response(self.requests())

    async def clear_requests(self, request: web.Request) -> web.Response:
        self.recorded.clear()
        return web.json_response({"cleared": True})

    async def get_config(self, request: web.Request) -> web.Response:
        return web.json_response(self.config.to_dict())

    async def post_config(self, request: web.Request) -> web.Response:
        try:
            changes = await request.json()
        except ValueError:
            return _error(400, "body must be a JSON object", "invalid_request_error")
        if not isinstance(changes, dict):
            return _error(400, "body must be a JSON object", "invalid_request_error")
        try:
            new = self.configure(changes)
        except ValueError as exc:
            return _error(400, str(exc), "invalid_request_error")
        return web.json_response(new.to_dict())

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats)

    async def clear_stats(self, request: web.Request) -> web.Response:
        self.stats = self._zero_stats()
        return web.json_response(self.stats)

    async def post_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response(self.config.to_dict())

    # -- chat completions ---------------------------------------------------------

    async def _record(self, request: web.Request) -> Any:
        """The request's body (parsed JSON, else its text), recorded."""
        raw_bytes = await request.read()
        raw = raw_bytes.decode("utf-8", errors="replace")
        body: Any
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw
        self.recorded.append(
            {
                "path": request.path,
                "headers": {k.lower(): v for k, v in request.headers.items()},
                "body": body,
                # Exactly the bytes received, for byte-identity checks.
                "raw_body_b64": base64.b64encode(raw_bytes).decode("ascii"),
            }
        )
        return body

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """The Responses API: the echo of what the model sees (:mod:`e2e.mock_responses`)."""
        body = await self._record(request)
        self.stats["responses"] += 1
        config = self.config
        if not isinstance(body, dict) or not isinstance(body.get("input"), (str, list)):
            return self._fail(400, "body must be a JSON object with an 'input'")
        await _sleep_at_least(config.latency_ms / 1000.0)
        if config.error_rate > 0.0 and self.rng.random() < config.error_rate:
            return self._fail(config.error_status, "injected error")
        self.stats["echo"] += 1
        model = body.get("model")
        model = model if isinstance(model, str) and model else config.model
        response_id = f"resp_mock_{next(self._ids):06d}"
        text = echo_input(body)
        if body.get("stream") is True:
            self.stats["stream"] += 1
            pieces = split_chunks(text, config)
            events = stream_events(body, response_id=response_id, model=model, pieces=pieces)
            return await send_stream(request, events, config)
        return web.json_response(
            response_object(body, response_id=response_id, model=model, text=text)
        )

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        self.stats["chat"] += 1
        config = self.config  # one consistent view for the whole request

        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return self._fail(400, "body must be a JSON object with a 'messages' list")
        tag = parse_task_tag(body)
        if tag is not None:
            tasks: dict[str, int] = self.stats["tasks"]
            tasks[tag.task] = tasks.get(tag.task, 0) + 1

        delay_ms = config.latency_ms + (config.task_latency_ms if tag is not None else 0.0)
        await _sleep_at_least(delay_ms / 1000.0)

        if tag is not None and config.fail_tasks:
            return self._fail(config.error_status, f"injected failure for task {tag.task!r}")
        if config.error_rate > 0.0 and self.rng.random() < config.error_rate:
            return self._fail(config.error_status, "injected error")

        json_mode = _wants_json(body)
        if tag is None:
            self.stats["echo"] += 1
            content = build_echo(request_messages(body))
            if json_mode:
                content = json.dumps({"echo": content}, ensure_ascii=False)
        else:
            handler = self.task_handlers.get(tag.task)
            if handler is None:
                return self._fail(400, f"mock LLM has no handler for task {tag.task!r}")
            content = GARBAGE_TEXT if config.garbage_tasks else handler(body)
            content = _decorate(content, config)

        model = body.get("model")
        model = model if isinstance(model, str) and model else config.model
        completion_id = f"chatcmpl-mock-{next(self._ids):06d}"
        usage = _usage(request_messages(body), content)
        if body.get("stream") is True:
            self.stats["stream"] += 1
            options = body.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            return await self._stream(
                request,
                completion_id=completion_id,
                model=model,
                content=content,
                usage=usage if include_usage else None,
                config=config,
            )
        return web.json_response(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "system_fingerprint": None,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
        )

    def _fail(self, status: int, message: str) -> web.Response:
        self.stats["errors"] += 1
        kind = "invalid_request_error" if status < 500 else "server_error"
        return _error(status, message, kind)

    async def _stream(
        self,
        request: web.Request,
        *,
        completion_id: str,
        model: str,
        content: str,
        usage: dict[str, int] | None,
        config: MockConfig,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        created = int(time.time())
        include_usage = usage is not None

        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            data: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": None,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
            if include_usage:
                data["usage"] = None
            return data

        events = [chunk({"role": "assistant", "content": ""}, None)]
        events += [chunk({"content": piece}, None) for piece in split_chunks(content, config)]
        events.append(chunk({}, "stop"))
        if usage is not None:
            events.append(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "system_fingerprint": None,
                    "choices": [],
                    "usage": usage,
                }
            )
        delay = config.stream_chunk_delay_ms / 1000.0
        try:
            for index, event in enumerate(events):
                if index and delay:
                    await _sleep_at_least(delay)
                await response.write(_sse(json.dumps(event, ensure_ascii=False)))
            await response.write(_sse("[DONE]"))
            await response.write_eof()
        except ConnectionError:
            log.debug("client went away during a streamed answer")
        return response


def split_chunks(content: str, config: MockConfig) -> list[str]:
    """Split ``content`` at word boundaries into at most ``stream_chunks`` pieces."""
    pieces = re.findall(r"\S+\s*|\s+", content)
    if not pieces:
        return []
    count = len(pieces) if config.stream_chunks == 0 else min(config.stream_chunks, len(pieces))
    size = len(pieces)
    return ["".join(pieces[i * size // count : (i + 1) * size // count]) for i in range(count)]


def _sse(data: str) -> bytes:
    return f"data: {data}\n\n".encode()


def _wants_json(body: Mapping[str, Any]) -> bool:
    fmt = body.get("response_format")
    return isinstance(fmt, Mapping) and fmt.get("type") in ("json_object", "json_schema")


def _decorate(content: str, config: MockConfig) -> str:
    if config.json_fences:
        content = f"```json\n{content}\n```"
    if config.think_tags:
        content = f"<think>\nThe user wants structured output. Let me think.\n</think>\n{content}"
    return content


def _count_words(text: str) -> int:
    return len(text.split())


def _usage(messages: Sequence[Mapping[str, Any]], content: str) -> dict[str, int]:
    prompt = sum(_count_words(flatten_content(m.get("content"))) for m in messages)
    completion = _count_words(content)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": status}},
        status=status,
    )


async def _sleep_at_least(seconds: float) -> None:
    """Sleep for at least ``seconds`` of monotonic time (never returns early)."""
    if seconds <= 0:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    await asyncio.sleep(seconds)
    remaining = deadline - loop.time()
    if remaining > 0:  # the loop may wake a clock tick early
        await asyncio.sleep(remaining)


SERVICE_KEY: Final = web.AppKey("mock_llm_service", MockLLMService)


def build_app(
    config: MockConfig | None = None,
    *,
    task_handlers: Mapping[str, TaskHandler] | None = None,
) -> web.Application:
    """An aiohttp app serving the mock; its service is ``app[SERVICE_KEY]``."""
    service = MockLLMService(config, task_handlers=task_handlers)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[SERVICE_KEY] = service
    service.add_routes(app)
    return app
