"""Group commit: concurrent upserts go out as one call, never mixing two writes of
one row, never losing a caller's error or a cancelled caller's absence."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.memory.store.coalesce import Coalescer


class Sink:
    """A send that records each call and holds it until released."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.sent: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = fail or set()

    async def send(self, items: list[str]) -> None:
        self.sent.append(items)
        await self.gate.wait()
        if self.fail & set(items):
            raise RuntimeError("store down")


def coalescer(sink: Sink, max_items: int = 100) -> Coalescer[str]:
    return Coalescer(sink.send, key=lambda item: item.split(":")[0], max_items=max_items)


async def behind_a_call_in_flight(
    joined: Coalescer[str], sink: Sink, later: list[list[str]]
) -> list[object]:
    """Submit ``["a:1"]`` and hold its send, submit each of ``later`` meanwhile, then
    let the sink go: every call's outcome (None, or its error), the first first."""
    sink.gate.clear()
    first = asyncio.create_task(joined.submit(["a:1"]))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sink.sent == [["a:1"]]  # in flight
    rest = [asyncio.create_task(joined.submit(items)) for items in later]
    await asyncio.sleep(0)
    sink.gate.set()
    return await asyncio.gather(first, *rest, return_exceptions=True)


async def test_a_lone_call_is_sent_at_once() -> None:
    sink = Sink()
    await coalescer(sink).submit(["a:1", "b:1"])
    assert sink.sent == [["a:1", "b:1"]]


async def test_calls_arriving_while_one_is_in_flight_go_out_together() -> None:
    sink = Sink()
    joined = coalescer(sink)
    outcomes = await behind_a_call_in_flight(joined, sink, [[f"{k}:1"] for k in "bcd"])
    assert outcomes == [None] * 4
    assert sink.sent == [["a:1"], ["b:1", "c:1", "d:1"]]
    assert (joined.calls, joined.sends) == (4, 2)


async def test_two_writes_of_one_row_stay_two_calls_in_order() -> None:
    sink = Sink()
    joined = coalescer(sink)
    later = [["b:1"], ["a:2"], ["c:1"], ["a:3"]]
    assert await behind_a_call_in_flight(joined, sink, later) == [None] * 5
    # "a:3" cannot share "a:2"'s call, and nothing after it overtakes it.
    assert sink.sent == [["a:1"], ["b:1", "a:2", "c:1"], ["a:3"]]
    order = [item for call in sink.sent for item in call if item.startswith("a:")]
    assert order == ["a:1", "a:2", "a:3"]


async def test_a_batch_never_exceeds_max_items_and_a_big_call_goes_alone() -> None:
    sink = Sink()
    joined = coalescer(sink, max_items=3)
    later = [["b:1", "c:1"], ["d:1", "e:1"], ["f:1", "g:1", "h:1", "i:1"], ["j:1"]]
    assert await behind_a_call_in_flight(joined, sink, later) == [None] * 5
    assert sink.sent == [
        ["a:1"],
        ["b:1", "c:1"],
        ["d:1", "e:1"],
        ["f:1", "g:1", "h:1", "i:1"],
        ["j:1"],
    ]


async def test_a_failed_call_fails_every_caller_in_it_and_no_other() -> None:
    sink = Sink(fail={"c:1"})
    joined = coalescer(sink)
    results = await behind_a_call_in_flight(joined, sink, [["b:1"], ["c:1"]])
    assert results[0] is None
    assert all(isinstance(r, RuntimeError) for r in results[1:])
    # The coalescer keeps working after a failure.
    await joined.submit(["d:1"])
    assert sink.sent[-1] == ["d:1"]


async def test_a_caller_cancelled_while_waiting_is_left_out() -> None:
    sink = Sink()
    joined = coalescer(sink)
    sink.gate.clear()
    first = asyncio.create_task(joined.submit(["a:1"]))
    await asyncio.sleep(0)
    gone = asyncio.create_task(joined.submit(["b:1"]))
    kept = asyncio.create_task(joined.submit(["c:1"]))
    await asyncio.sleep(0)
    gone.cancel()
    sink.gate.set()
    await asyncio.gather(first, kept)
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert sink.sent == [["a:1"], ["c:1"]]


def test_max_items_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_items"):
        Coalescer(Sink().send, key=str, max_items=0)
