"""The channel between a sidecar worker and its writer process
(``write_queue.own_process``).

The worker accepts turns into the journal; the writer, a process of its own, claims
and writes them. Two things cross between them on one Unix socket the supervisor
names (``write_queue.relay_socket``), served by the worker:

- worker -> writer, ``wake``: a turn was accepted, so the writer claims it now
  instead of at its next poll (``write_queue.poll_interval_s``);
- writer -> worker, what the writer's corpus cache was told (:class:`CacheMirror`):
  rows it stored (``apply``: the worker's cache takes them as its own writes, so the
  user's next request sees them), rows and users whose cached units are stale
  (``invalidate``, ``invalidate_user``).

A frame is ``FRAME`` (kind, body length) and a JSON body: a list of rows (the
store's row fields, the vector as a list of floats), or a user id. Nothing here is
needed for correctness: while the socket is down the writer polls the journal and
the worker's cache reads the writer's rows at its next delta refresh
(``cache.ttl_s``); frames that could not be sent are counted (``dropped``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import struct
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from sidecar.memory.corpus_cache import CorpusCache
from sidecar.memory.records import MemoryRecord
from sidecar.memory.store import row_to_record
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

FRAME = struct.Struct("<cI")  # kind, body bytes
#: Larger frames are a protocol error (the connection is closed).
MAX_BODY = 64 * 1024 * 1024
WAKE, APPLY, INVALIDATE, INVALIDATE_USER = b"W", b"A", b"I", b"U"
_KIND_NAMES = {
    WAKE: "wake",
    APPLY: "apply",
    INVALIDATE: "invalidate",
    INVALIDATE_USER: "invalidate_user",
}
#: First and longest pause between a writer's connection attempts.
_RECONNECT_START_S = 0.05
_RECONNECT_MAX_S = 1.0


def _remove_stale_socket(path: str) -> None:
    Path(path).unlink(missing_ok=True)


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def encode_records(records: Sequence[MemoryRecord]) -> bytes:
    """``records`` as a JSON list of their fields (enums by value)."""
    rows = [
        {f.name: _plain(getattr(record, f.name)) for f in dataclasses.fields(record)}
        for record in records
    ]
    return json.dumps(rows, separators=(",", ":")).encode()


def decode_records(body: bytes) -> list[MemoryRecord]:
    """The records of :func:`encode_records`; ``ValueError`` if ``body`` is not that."""
    rows = json.loads(body)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError("not a list of rows")
    try:
        return [row_to_record(row) for row in rows]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a memory row: {type(exc).__name__}") from exc


class RelayServer:
    """The worker's end: applies what its writers' caches were told to ``cache``
    and wakes them when a turn is accepted (:meth:`wake`)."""

    def __init__(self, cache: CorpusCache, metrics: Metrics) -> None:
        self._cache = cache
        self._metrics = metrics
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def connections(self) -> int:
        return len(self._writers)

    async def start(self, path: str) -> None:
        _remove_stale_socket(path)  # left by a worker that was killed
        self._server = await asyncio.start_unix_server(self._serve, path=path)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.close()  # their readers end without being cancelled
        if self._connections:
            await asyncio.wait(self._connections, timeout=1.0)
        for task in list(self._connections):
            task.cancel()

    def wake(self) -> None:
        """Tell every connected writer a turn is waiting (never blocks)."""
        frame = FRAME.pack(WAKE, 0)
        if not self._writers:
            self._metrics.relay_frames.labels(kind="wake", outcome="dropped").inc()
            return
        for writer in list(self._writers):
            if writer.is_closing() or writer.transport.get_write_buffer_size() > MAX_BODY:
                continue  # a writer that stops reading finds its turns by polling
            writer.write(frame)
            self._metrics.relay_frames.labels(kind="wake", outcome="sent").inc()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        current = asyncio.current_task()
        if current is not None:
            self._connections.add(current)
        self._writers.add(writer)
        self._metrics.relay_connections.set(len(self._writers))
        log.info("writer process connected")
        try:
            while True:
                kind, size = FRAME.unpack(await reader.readexactly(FRAME.size))
                if size > MAX_BODY or kind not in _KIND_NAMES or kind == WAKE:
                    self._metrics.relay_frames.labels(kind="unknown", outcome="malformed").inc()
                    log.warning("relay frame refused (kind %r, %d bytes); closing", kind, size)
                    return
                self._receive(kind, await reader.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the writer closed its end (or is gone)
        finally:
            self._writers.discard(writer)
            self._metrics.relay_connections.set(len(self._writers))
            writer.close()
            if current is not None:
                self._connections.discard(current)
            log.info("writer process disconnected")

    def _receive(self, kind: bytes, body: bytes) -> None:
        name = _KIND_NAMES[kind]
        try:
            if kind == INVALIDATE_USER:
                user_id = json.loads(body)
                if not isinstance(user_id, str):
                    raise ValueError("not a user id")
                self._cache.invalidate_user(user_id)
            else:
                records = decode_records(body)
                if kind == APPLY:
                    self._cache.apply(records)
                else:
                    for record in records:
                        self._cache.invalidate(record)
        except ValueError:
            self._metrics.relay_frames.labels(kind=name, outcome="malformed").inc()
            return
        self._metrics.relay_frames.labels(kind=name, outcome="received").inc()


class RelayClient:
    """The writer's end, a :class:`CacheMirror` of its corpus cache: forwards what
    the cache was told to the worker, and calls ``on_wake`` when the worker accepted
    a turn. Connects (and reconnects) in the background after :meth:`start`."""

    def __init__(self, path: str, metrics: Metrics, on_wake: Callable[[], None]) -> None:
        self._path = path
        self._metrics = metrics
        self._on_wake = on_wake
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="write-relay")

    async def wait_connected(self, timeout_s: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._connected.wait()
        return self.connected

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    async def _run(self) -> None:
        pause = _RECONNECT_START_S
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(self._path)
            except OSError:
                await asyncio.sleep(pause)
                pause = min(_RECONNECT_MAX_S, pause * 2)
                continue
            pause = _RECONNECT_START_S
            self._writer = writer
            self._connected.set()
            self._on_wake()  # turns accepted while disconnected
            try:
                while True:
                    kind, size = FRAME.unpack(await reader.readexactly(FRAME.size))
                    if kind != WAKE or size:
                        self._metrics.relay_frames.labels(kind="unknown", outcome="malformed").inc()
                        break
                    self._metrics.relay_frames.labels(kind="wake", outcome="received").inc()
                    self._on_wake()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass  # the worker is gone: reconnect when it is back
            finally:
                self._connected.clear()
                self._writer = None
                writer.close()

    def _send(self, kind: bytes, body: bytes) -> None:
        name = _KIND_NAMES[kind]
        writer = self._writer
        if (
            writer is None
            or writer.is_closing()
            or writer.transport.get_write_buffer_size() > MAX_BODY  # a worker not reading
        ):
            self._metrics.relay_frames.labels(kind=name, outcome="dropped").inc()
            return
        writer.write(FRAME.pack(kind, len(body)) + body)
        self._metrics.relay_frames.labels(kind=name, outcome="sent").inc()

    # -- CacheMirror ----------------------------------------------------------------

    def applied(self, records: Sequence[MemoryRecord]) -> None:
        if records:
            self._send(APPLY, encode_records(records))

    def invalidated(self, records: Sequence[MemoryRecord]) -> None:
        if records:
            self._send(INVALIDATE, encode_records(records))

    def invalidated_user(self, user_id: str) -> None:
        self._send(INVALIDATE_USER, json.dumps(user_id).encode())
