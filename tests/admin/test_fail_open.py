"""Fail-open events are counted by reason: a retrieval that fails or times out lets
the request go upstream unchanged (fail_open: true) and moves
``memory_sidecar_fail_open_total``; a fail-closed profile answers 503 instead."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from sidecar.errors import EmbeddingError
from sidecar.runtime.server import Sidecar
from tests.admin.test_logging import exchange
from tests.extproc import messages as msg


async def test_retrieval_failures_count_as_fail_open(
    sidecar: Sidecar, channel: grpc.aio.Channel, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = sidecar.components.metrics

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise EmbeddingError("model down")

    async def slow(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(2)

    for replacement, reason in ((broken, "retrieval_error"), (slow, "retrieval_timeout")):
        before = metrics.value("memory_sidecar_fail_open_total", {"reason": reason})
        monkeypatch.setattr(sidecar.components.read.memory.embedder, "embed", replacement)
        replies = await exchange(
            channel,
            [msg.request_headers(user="fail-open-user"), msg.request_body(msg.chat_body("Hi"))],
        )
        body = replies[1].request_body.response
        assert not body.HasField("body_mutation")  # unchanged: went on without memory
        after = metrics.value("memory_sidecar_fail_open_total", {"reason": reason})
        assert after == before + 1, reason
