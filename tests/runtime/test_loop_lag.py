"""The event loop's lag: near zero while the loop keeps up, the length of a stall
when a callback holds it."""

from __future__ import annotations

import asyncio
import time

import pytest

from sidecar.metrics import Metrics
from sidecar.runtime.loop_lag import LoopLagMonitor

LAG = "memory_sidecar_event_loop_lag_seconds"


def observed_over(metrics: Metrics, seconds: float) -> float:
    """Observations above ``seconds`` (a bucket bound)."""
    total = metrics.value(f"{LAG}_count")
    return total - metrics.value(f"{LAG}_bucket", {"le": str(seconds)})


async def test_a_stall_is_observed_as_long_as_it_was() -> None:
    metrics = Metrics()
    monitor = LoopLagMonitor(metrics.loop_lag, 0.01)
    monitor.start()
    try:
        await asyncio.sleep(0.2)
        assert metrics.value(f"{LAG}_count") >= 5
        assert observed_over(metrics, 0.05) == 0  # nothing held the loop
        asyncio.get_running_loop().call_soon(time.sleep, 0.15)  # holds the loop 150 ms
        await asyncio.sleep(0.2)
        assert observed_over(metrics, 0.1) == 1
        assert metrics.value(f"{LAG}_sum") >= 0.13
    finally:
        await monitor.stop()
    count = metrics.value(f"{LAG}_count")
    await asyncio.sleep(0.05)
    assert metrics.value(f"{LAG}_count") == count  # stopped
    with pytest.raises(ValueError, match="interval_s"):
        LoopLagMonitor(metrics.loop_lag, 0)
