"""Deterministic mock of an OpenAI-compatible LLM server (aiohttp).

It plays two roles in the end-to-end setup:

1. The upstream model server ("vLLM") behind Envoy.  For ordinary requests it
   *echoes* every message it received, so a test can read back exactly what
   the sidecar injected::

       ECHO
       [system] <full system content>
       [user] <content>

2. The LLM the sidecar itself calls for its own tasks.  The sidecar marks those
   prompts with a tag at the very start of the first system message,
   ``[memory-sidecar:<task> v<N>]`` (e.g. ``[memory-sidecar:extract v1]``), and
   the mock answers them with deterministic rules.  Handlers live in a
   registry (:data:`DEFAULT_TASK_HANDLERS`), one function per task name.

Routes::

    POST   /v1/chat/completions   JSON or SSE ("stream": true)
    POST   /v1/responses          the Responses API, JSON or typed SSE events
    GET    /v1/models
    GET    /health
    GET    /_mock/requests        recorded chat-completions requests
    DELETE /_mock/requests        clear the record
    GET    /_mock/config          current fault/latency/format knobs
    POST   /_mock/config          partial update of the knobs (JSON object)
    GET    /_mock/stats           counters
    DELETE /_mock/stats           zero the counters
    POST   /_mock/reset           initial config, empty record, zero counters

Run it standalone with ``python -m e2e.mock_llm --port 0``; it prints
``MOCK_LLM_PORT=<port>`` once it is listening and stops on SIGTERM/SIGINT.
In-process, use :func:`start_mock`.

This module starts and stops the mock (:class:`MockLLM`, :func:`start_mock`, the
command line) and re-exports the names of its parts: the HTTP service
(:mod:`e2e.mock_service`), its knobs (:mod:`e2e.mock_config`), the request
conventions and echo answer (:mod:`e2e.mock_protocol`) and the task answers
(:mod:`e2e.mock_extract`, :mod:`e2e.mock_judge`, :mod:`e2e.mock_search`).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import logging
import signal
import sys
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Self

from aiohttp import web

from e2e.mock_config import MockConfig
from e2e.mock_extract import extract_facts, handle_extract, parse_extract_turn, third_person
from e2e.mock_protocol import (
    TASK_TAG_RE,
    TaskHandler,
    TaskTag,
    build_echo,
    flatten_content,
    format_task_tag,
    parse_task_tag,
)
from e2e.mock_service import (
    DEFAULT_TASK_HANDLERS,
    SERVICE_KEY,
    MockLLMService,
    build_app,
    split_chunks,
)

__all__ = [
    "DEFAULT_TASK_HANDLERS",
    "PORT_LINE_PREFIX",
    "SERVICE_KEY",
    "TASK_TAG_RE",
    "MockConfig",
    "MockLLM",
    "MockLLMService",
    "TaskHandler",
    "TaskTag",
    "build_app",
    "build_echo",
    "extract_facts",
    "flatten_content",
    "format_task_tag",
    "handle_extract",
    "main",
    "parse_extract_turn",
    "parse_task_tag",
    "split_chunks",
    "start_mock",
    "third_person",
]

log = logging.getLogger("e2e.mock_llm")

PORT_LINE_PREFIX: Final = "MOCK_LLM_PORT="

# ---------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------


class MockLLM:
    """A running mock server (see :func:`start_mock`); also an async context manager."""

    def __init__(self, runner: web.AppRunner, service: MockLLMService, host: str, port: int):
        self._runner = runner
        self.service = service
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        """Root URL, e.g. ``http://127.0.0.1:8000``."""
        host = self.host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI SDK base URL, e.g. ``http://127.0.0.1:8000/v1``."""
        return f"{self.url}/v1"

    @property
    def config(self) -> MockConfig:
        return self.service.config

    def configure(self, **changes: Any) -> MockConfig:
        """Validated partial config update, like ``POST /_mock/config``."""
        return self.service.configure(changes)

    def requests(self) -> list[dict[str, Any]]:
        """Recorded chat requests, oldest first: ``{path, headers, body}``."""
        return self.service.requests()

    def task_requests(self, task: str) -> list[dict[str, Any]]:
        """Recorded requests tagged ``[memory-sidecar:<task> ...]``."""
        return [r for r in self.requests() if _task_of(r["body"]) == task]

    def upstream_requests(self) -> list[dict[str, Any]]:
        """Recorded requests that carry no task tag (the traffic Envoy forwards)."""
        return [r for r in self.requests() if _task_of(r["body"]) is None]

    def clear_requests(self) -> None:
        self.service.recorded.clear()

    def stats(self) -> dict[str, Any]:
        return copy.deepcopy(self.service.stats)

    def reset(self) -> None:
        self.service.reset()

    async def close(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _task_of(body: object) -> str | None:
    if not isinstance(body, dict):
        return None
    tag = parse_task_tag(body)
    return None if tag is None else tag.task


async def start_mock(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    task_handlers: Mapping[str, TaskHandler] | None = None,
    **config: Any,
) -> MockLLM:
    """Start the mock in this event loop; ``port=0`` picks a free port.

    ``config`` takes :class:`MockConfig` fields (``latency_ms=50, error_rate=0.1``...).
    """
    cfg = MockConfig().updated(config)
    app = build_app(cfg, task_handlers=task_handlers)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        actual_port = int(runner.addresses[0][1])
    except BaseException:
        await runner.cleanup()
        raise
    return MockLLM(runner, app[SERVICE_KEY], host, actual_port)


def _parser() -> argparse.ArgumentParser:
    defaults = MockConfig()
    p = argparse.ArgumentParser(
        prog="python -m e2e.mock_llm",
        description="Deterministic mock OpenAI-compatible LLM server (echo + sidecar tasks).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--model", default=defaults.model)
    p.add_argument("--latency-ms", type=float, default=defaults.latency_ms)
    p.add_argument("--task-latency-ms", type=float, default=defaults.task_latency_ms)
    p.add_argument("--stream-chunk-delay-ms", type=float, default=defaults.stream_chunk_delay_ms)
    p.add_argument("--stream-chunks", type=int, default=defaults.stream_chunks)
    p.add_argument("--error-rate", type=float, default=defaults.error_rate)
    p.add_argument("--error-status", type=int, default=defaults.error_status)
    p.add_argument("--fail-tasks", action="store_true")
    p.add_argument("--garbage-tasks", action="store_true")
    p.add_argument("--json-fences", action="store_true")
    p.add_argument("--think-tags", action="store_true")
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--max-requests", type=int, default=defaults.max_requests)
    p.add_argument("--log-level", default="WARNING")
    return p


def _config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(MockConfig)}


async def _serve(args: argparse.Namespace) -> int:
    config = _config_from_args(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    mock = await start_mock(args.host, args.port, **config)
    try:
        print(f"{PORT_LINE_PREFIX}{mock.port}", flush=True)
        log.info("mock LLM listening on %s", mock.url)
        await stop.wait()
    finally:
        await mock.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; runs until SIGTERM/SIGINT and returns 0."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    try:
        MockConfig().updated(_config_from_args(args))
    except ValueError as exc:
        print(f"mock_llm: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
