"""Group commit: upserts that arrive while one is in flight go out as one call.

Every store call has a fixed cost on both sides of the connection — the client
packs a request and waits on a thread, milvus-lite (or a server's proxy) parses it,
assigns timestamps and writes a log entry — that a call of a few rows pays almost
whole: the write path's turns upsert two or three rows each, and several turns are
written at once (``write_queue.workers``). :class:`Coalescer` sends the first call
at once; calls arriving while it is in flight wait, and go out together as the next
call. A lone call is never delayed beyond one turn of the event loop.

A batch never carries two rows with one id (two writes of one row stay two calls,
in the order they came), and never more than ``max_items`` rows; a call larger than
that goes alone (callers chunk bulk work themselves). A failed call fails every
caller in it (with its error); a caller cancelled before its batch
is sent is left out of it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class _Call(Generic[T]):
    items: Sequence[T]
    future: asyncio.Future[None]
    keys: frozenset[str] = field(default_factory=frozenset)


class Coalescer(Generic[T]):
    """See the module docstring. ``send`` writes a list of items; ``key`` names an
    item's row. One event loop at a time may use an instance."""

    def __init__(
        self,
        send: Callable[[list[T]], Awaitable[None]],
        *,
        key: Callable[[T], str],
        max_items: int,
    ) -> None:
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        self._send = send
        self._key = key
        self._max_items = max_items
        self._waiting: deque[_Call[T]] = deque()
        self._task: asyncio.Task[None] | None = None
        #: Calls made and sends done (a send carries one call or more).
        self.calls = 0
        self.sends = 0

    async def submit(self, items: Sequence[T]) -> None:
        """Write ``items``, together with whatever else is waiting."""
        if not items:
            return
        loop = asyncio.get_running_loop()
        call = _Call(items, loop.create_future(), frozenset(self._key(i) for i in items))
        self._waiting.append(call)
        self.calls += 1
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain())
        await call.future

    async def _drain(self) -> None:
        while self._waiting:
            batch = self._take()
            if not batch:
                continue
            self.sends += 1
            try:
                await self._send([item for call in batch for item in call.items])
            except asyncio.CancelledError:
                self._fail(batch, None)
                self._fail(list(self._waiting), None)
                self._waiting.clear()
                raise
            except Exception as exc:  # the store's errors, handed to each caller
                self._fail(batch, exc)
            else:
                for call in batch:
                    if not call.future.done():
                        call.future.set_result(None)

    def _take(self) -> list[_Call[T]]:
        """The next batch: waiting calls in order while they fit and share no row."""
        batch: list[_Call[T]] = []
        keys: set[str] = set()
        size = 0
        while self._waiting:
            call = self._waiting[0]
            if call.future.done():  # cancelled while waiting
                self._waiting.popleft()
                continue
            if batch and (
                size + len(call.items) > self._max_items or not keys.isdisjoint(call.keys)
            ):
                break
            self._waiting.popleft()
            batch.append(call)
            keys |= call.keys
            size += len(call.items)
        return batch

    @staticmethod
    def _fail(batch: Sequence[_Call[T]], exc: Exception | None) -> None:
        for call in batch:
            if call.future.done():
                continue
            if exc is None:
                call.future.cancel()
            else:
                call.future.set_exception(exc)
