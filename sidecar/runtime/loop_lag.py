"""How late the event loop runs what is due: the measure of a stall.

Everything a request does in this process runs on one event loop; a callback that
holds it (a corpus rebuilt, rows converted, a garbage collection) delays every
request in flight by as long. :class:`LoopLagMonitor` sleeps ``interval_s`` again
and again and observes how much later than asked it woke up
(``memory_sidecar_event_loop_lag_seconds``): near zero while the loop keeps up, the
length of the stall when something held it.
"""

from __future__ import annotations

import asyncio

from prometheus_client import Histogram

from sidecar.tasks import cancel_and_wait


class LoopLagMonitor:
    def __init__(self, histogram: Histogram, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self._histogram = histogram
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-lag")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self._interval_s
            await asyncio.sleep(self._interval_s)
            self._histogram.observe(max(0.0, loop.time() - due))
