"""The bounded background queue between the response path and the write pipeline.

``submit`` never waits: the response path hands a turn over and returns. When the
queue is full the turn is shed and counted (``memory_sidecar_turns{outcome="shed"}``).
Workers write turns concurrently (the writer serialises per user). ``drain`` waits
for queued turns on shutdown, up to a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from sidecar.config import WriteQueueConfig
from sidecar.errors import SidecarError
from sidecar.memory.turns import Turn
from sidecar.memory.writer import WriteResult
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)


class TurnWriter(Protocol):
    async def write_turn(self, turn: Turn) -> WriteResult: ...


class WriteQueue:
    def __init__(self, writer: TurnWriter, config: WriteQueueConfig, metrics: Metrics) -> None:
        self._writer = writer
        self._config = config
        self._metrics = metrics
        self._queue: asyncio.Queue[Turn] = asyncio.Queue(maxsize=config.max_pending)
        self._workers: list[asyncio.Task[None]] = []
        self._accepting = False

    def start(self) -> None:
        self._accepting = True
        self._workers = [
            asyncio.create_task(self._work(), name=f"write-worker-{i}")
            for i in range(self._config.workers)
        ]

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def submit(self, turn: Turn) -> bool:
        """Queue ``turn`` for writing; False (and counted) when shed."""
        if not self._accepting:
            self._metrics.turns.labels(outcome="rejected_shutdown").inc()
            return False
        try:
            self._queue.put_nowait(turn)
        except asyncio.QueueFull:
            self._metrics.turns.labels(outcome="shed").inc()
            log.warning("write queue full (%d); turn shed", self._config.max_pending)
            return False
        self._metrics.turns.labels(outcome="accepted").inc()
        self._metrics.queue_depth.set(self._queue.qsize())
        return True

    async def _work(self) -> None:
        while True:
            turn = await self._queue.get()
            try:
                await self._writer.write_turn(turn)
            except SidecarError as exc:
                self._metrics.turns.labels(outcome="failed").inc()
                log.error(
                    "writing turn failed: %s request_id=%s", type(exc).__name__, turn.request_id
                )
            except Exception:  # a worker must survive any bug in one turn
                self._metrics.turns.labels(outcome="failed").inc()
                log.exception("writing turn crashed request_id=%s", turn.request_id)
            else:
                self._metrics.turns.labels(outcome="written").inc()
            finally:
                self._queue.task_done()
                self._metrics.queue_depth.set(self._queue.qsize())

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every queued turn is processed (True) or the timeout passes."""
        try:
            await asyncio.wait_for(self._queue.join(), timeout=timeout_s)
        except TimeoutError:
            return False
        return True

    async def drain(self, timeout_s: float | None = None) -> bool:
        """Stop accepting, wait for queued turns (True if all were written in time)."""
        self._accepting = False
        deadline = self._config.drain_timeout_s if timeout_s is None else timeout_s
        if await self.wait_idle(deadline):
            return True
        log.warning("drain deadline passed with %d turns queued", self._queue.qsize())
        return False

    async def close(self) -> None:
        self._accepting = False
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers = []
