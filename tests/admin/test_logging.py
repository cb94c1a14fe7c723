"""Every log line emitted while a request is handled carries its request id: ext_proc
streams (Envoy's ``x-request-id``, or a generated one), concurrent streams never
mixing them up, and the write worker handling that request's turn. The JSON lines
carry no memory text."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest

from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from sidecar._proto.envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from sidecar.config import WriteQueueConfig
from sidecar.logs import REQUEST_ID, JsonFormatter, clean_request_id, request_context
from sidecar.memory.records.turns import Turn
from sidecar.memory.write.turns.queue import WriteQueue
from sidecar.memory.write.turns.writer import WriteResult
from sidecar.metrics import Metrics
from sidecar.runtime.server import Sidecar
from tests.extproc import messages as msg


async def exchange(
    channel: grpc.aio.Channel,
    requests: Sequence[pb.ProcessingRequest],
    profile: str | None = None,
    pause: float = 0.0,
) -> list[pb.ProcessingResponse]:
    stub = pb_grpc.ExternalProcessorStub(channel)
    call = stub.Process(metadata=(("x-memory-profile", profile),) if profile else None)
    replies = []
    for request in requests:
        await call.write(request)
        replies.append(await call.read())
        await asyncio.sleep(pause)  # interleave with the other stream
    await call.done_writing()
    return replies


def lines_of(
    records: list[logging.LogRecord], logger_prefix: str = "sidecar"
) -> list[dict[str, str]]:
    formatter = JsonFormatter()
    return [json.loads(formatter.format(r)) for r in records if r.name.startswith(logger_prefix)]


async def test_log_lines_of_concurrent_streams_carry_their_own_request_id(
    channel: grpc.aio.Channel, captured_logs: list[logging.LogRecord]
) -> None:
    secret = "My passport is hidden under the mattress."
    bad_identity = exchange(
        channel,
        [
            msg.request_headers(user="bad\x01user", extra={"x-request-id": "req-identity"}),
            msg.request_body(msg.chat_body(secret)),
        ],
        pause=0.01,
    )
    unknown_profile = exchange(
        channel,
        [
            msg.request_headers(user="alice-logs", extra={"x-request-id": "req-profile"}),
            msg.request_body(msg.chat_body(secret)),
        ],
        profile="no-such-profile",
        pause=0.01,
    )
    no_header = exchange(
        channel, [msg.request_headers(user="alice-logs")], profile="no-such-profile"
    )
    await asyncio.gather(bad_identity, unknown_profile, no_header)
    lines = lines_of(captured_logs)
    identity = [line for line in lines if "invalid identity header" in line["msg"]]
    profile = [line for line in lines if "unknown memory profile" in line["msg"]]
    assert [line["request_id"] for line in identity] == ["req-identity"]
    assert sorted(line["request_id"] for line in profile)[0].startswith("req-profile")
    generated = [line["request_id"] for line in profile if line["request_id"] != "req-profile"]
    assert len(generated) == 1
    assert generated[0].startswith("sc-")
    # Nothing logged while a stream was open lacks an id.
    assert all(line.get("request_id") for line in lines), lines
    text = json.dumps(lines)
    assert "passport" not in text
    assert "mattress" not in text
    assert REQUEST_ID.get() == ""  # the streams' ids never leaked into this context


async def test_a_full_request_logs_nothing_private(
    sidecar: Sidecar, channel: grpc.aio.Channel, captured_logs: list[logging.LogRecord]
) -> None:
    secret = "My bank PIN is 2468."
    await exchange(
        channel,
        [
            msg.request_headers(user="alice-full", extra={"x-request-id": "req-full"}),
            msg.request_body(msg.chat_body(secret)),
            msg.response_headers(),
            msg.response_body(msg.completion_json("Noted, I will remember.")),
        ],
    )
    assert await sidecar.components.write.queue.wait_idle(30)
    lines = lines_of(captured_logs)
    assert all(line.get("request_id") for line in lines), lines
    assert "2468" not in json.dumps(lines)


class LoggingWriter:
    async def write_turn(self, turn: Turn) -> WriteResult:
        logging.getLogger("sidecar.test.writer").warning("writing a turn")
        return WriteResult(stored=1)


async def test_write_worker_lines_carry_the_turns_request_id(
    tmp_path: Path, captured_logs: list[logging.LogRecord]
) -> None:
    config = WriteQueueConfig(journal_path=str(tmp_path / "journal.sqlite3"))
    queue = WriteQueue(LoggingWriter(), config, Metrics())  # type: ignore[arg-type]
    await queue.start()
    try:
        turn = Turn(
            user_id="u", user_text="hi", assistant_text="ok", created_at=1, request_id="req-turn"
        )
        with request_context("req-submit"):
            assert await queue.submit(turn)
        assert await queue.wait_idle(10)
    finally:
        await queue.close()
    written = [line for line in lines_of(captured_logs) if line["msg"] == "writing a turn"]
    assert [line["request_id"] for line in written] == ["req-turn"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [("abc-123", "abc-123"), ("  x  ", "x"), ("a\nb\x00c", "abc"), ("é" * 200, "é" * 128)],
)
def test_request_ids_are_cleaned(given: str, expected: str) -> None:
    assert clean_request_id(given) == expected


@pytest.mark.parametrize("given", [None, "", "   ", "\x00\x01"])
def test_missing_request_ids_are_generated(given: str | None) -> None:
    generated = clean_request_id(given)
    assert generated.startswith("sc-")
    assert generated != clean_request_id(given)


@pytest.mark.parametrize(
    ("debug_content", "level"), [(False, logging.CRITICAL), (True, logging.WARNING)]
)
def test_pymilvus_logs_through_ours_and_only_with_debug_content(
    debug_content: bool, level: int
) -> None:
    """pymilvus' own stderr handler is gone (its RPC errors printed tracebacks, not
    JSON, and may quote filters naming users); its records reach the sidecar's
    handler, and only with ``logging.debug_content``."""
    from sidecar.config import LoggingConfig
    from sidecar.logs import PYMILVUS_LOGGERS, configure_logging

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    libraries = [logging.getLogger(name) for name in PYMILVUS_LOGGERS]
    kept = [(lib.handlers[:], lib.propagate, lib.level) for lib in libraries]
    try:
        configure_logging(LoggingConfig(debug_content=debug_content))
        for lib in libraries:
            assert lib.handlers == []
            assert lib.propagate
            assert lib.level == level
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
        for lib, (handlers, propagate, old_level) in zip(libraries, kept, strict=True):
            lib.handlers[:] = handlers
            lib.propagate = propagate
            lib.setLevel(old_level)


def test_python_warnings_are_json_log_lines_and_the_pkg_resources_notice_is_dropped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A sidecar's log opened with milvus-lite's multi-line pkg_resources warning
    although logs are JSON lines."""
    import warnings

    from sidecar.config import LoggingConfig
    from sidecar.logs import configure_logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")  # not the suite's "error"
            logging.captureWarnings(False)  # an earlier CLI test's capture, undone
            configure_logging(LoggingConfig())
            warnings.warn(
                "pkg_resources is deprecated as an API. See ...", UserWarning, stacklevel=2
            )
            warnings.warn("something worth knowing", UserWarning, stacklevel=2)
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert [json.loads(line)["logger"] for line in lines] == ["py.warnings"]
        assert "something worth knowing" in json.loads(lines[0])["msg"]
    finally:
        logging.captureWarnings(False)
        root.handlers[:] = handlers
        root.setLevel(level)
