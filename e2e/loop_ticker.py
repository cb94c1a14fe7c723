"""How late the event loop runs a timer due every millisecond, for the benches: the
length of whatever held the loop that every request of the process shares (the
production gauge is :class:`sidecar.runtime.loop_lag.LoopLagMonitor`)."""

from __future__ import annotations

import asyncio

from sidecar.evaluation.metrics import percentile

TICK_S = 0.001


class Ticker:
    """A timer due every :data:`TICK_S` while running: how late each one ran."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._stop = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stop:
            due = loop.time() + TICK_S
            await asyncio.sleep(TICK_S)
            self.lags.append(max(0.0, loop.time() - due))

    def stop(self) -> None:
        self._stop = True


def lag_summary(lags: list[float]) -> dict[str, float]:
    """Ticks, and the lag's p50, p99 and maximum in ms."""
    return {
        "ticks": len(lags),
        "p50_ms": 1000 * percentile(lags, 50),
        "p99_ms": 1000 * percentile(lags, 99),
        "max_ms": 1000 * max(lags, default=0.0),
    }
