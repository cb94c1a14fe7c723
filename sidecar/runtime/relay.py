"""The cache relay: what one process of a host writes reaches the corpus caches of
the others at once (``server.workers`` > 1, ``write_queue.own_process``).

Every supervised sidecar worker serves its cache on a Unix socket the supervisor
names (``cache.relay_socket``) and connects to every other worker's
(``cache.relay_peers``); a writer process of its own connects to its worker's and
to all the others. What a process's cache is told by that process's writes
(:class:`~sidecar.memory.corpus.write_stamps.CacheMirror`) is sent to every peer:

- ``apply``: rows stored or changed (a turn's facts, back-links, category moves,
  retention, admin edits, tombstones) — a peer's cache takes them as
  its own writes, so a user's next request sees them whichever worker serves it;
- ``invalidate``, ``invalidate_user``: rows and users whose cached units are stale.

One more frame goes the other way: ``wake``, from a worker to its own writer when it
accepted a turn, so the writer claims it now instead of at its next poll
(``write_queue.poll_interval_s``); a client says whether it wants them in its
``hello``.

A frame is ``FRAME`` (kind, body length) and a body: the write's stamp
(:mod:`sidecar.memory.corpus.write_stamps`) and JSON rows (the record's fields, the vector
as base64 float32) or a JSON user id; or one byte. Received rows are applied
without being sent on (no echo), unless the cache already applied a newer write of
them: two peers' frames about one row may arrive in either order. Nothing here is
needed for correctness: while a socket is down its peer's cache reads the rows at
its next delta refresh (``cache.ttl_s``) and the writer polls the journal; frames
that could not be sent are counted (``outcome="dropped"``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import json
import logging
import struct
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.records.embeddings import Embedding
from sidecar.memory.records.records import MemoryRecord
from sidecar.memory.store.schema import encode_origins, row_to_record
from sidecar.metrics import Metrics
from sidecar.tasks import cancel_and_wait
from sidecar.unix_socket import start_unix_server

log = logging.getLogger(__name__)

FRAME = struct.Struct("<cI")  # kind, body bytes
#: The write stamp that starts the body of apply and invalidate frames.
STAMP = struct.Struct("<Q")
#: Larger frames are a protocol error (the connection is closed); a peer that lets
#: this much pile up unread is skipped until it reads again.
MAX_BODY = 64 * 1024 * 1024
HELLO, WAKE, APPLY, INVALIDATE, INVALIDATE_USER = b"H", b"W", b"A", b"I", b"U"
_KIND_NAMES = {
    HELLO: "hello",
    WAKE: "wake",
    APPLY: "apply",
    INVALIDATE: "invalidate",
    INVALIDATE_USER: "invalidate_user",
}
#: First and longest pause between a client's connection attempts.
_RECONNECT_START_S = 0.05
_RECONNECT_MAX_S = 1.0


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def _row(record: MemoryRecord) -> dict[str, Any]:
    row = {
        f.name: _plain(getattr(record, f.name))
        for f in dataclasses.fields(record)
        if f.name != "origins"
    }
    row["provenance"] = encode_origins(record.origins)  # as a stored row keeps it
    if record.embedding is not None:  # float32 bytes: far cheaper than a list of floats
        row["embedding"] = base64.b64encode(record.embedding.raw).decode("ascii")
    return row


def encode_records(records: Sequence[MemoryRecord]) -> bytes:
    """``records`` as a JSON list of their fields (enums by value; the vector as
    base64 of little-endian float32, the precision every stored vector has)."""
    return json.dumps([_row(r) for r in records], separators=(",", ":")).encode()


def decode_records(body: bytes) -> list[MemoryRecord]:
    """The records of :func:`encode_records`; ``ValueError`` if ``body`` is not that."""
    try:
        rows = json.loads(body)
    except RecursionError as exc:
        raise ValueError("nested too deep") from exc
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError("not a list of rows")
    try:
        for row in rows:
            vector = row.get("embedding")
            if vector is not None:
                row["embedding"] = Embedding.from_bytes(base64.b64decode(vector, validate=True))
        return [row_to_record(row) for row in rows]
    except (KeyError, TypeError, binascii.Error) as exc:
        raise ValueError(f"not a memory row: {type(exc).__name__}") from exc


def _writable(writer: asyncio.StreamWriter | None) -> bool:
    return (
        writer is not None
        and not writer.is_closing()
        and writer.transport.get_write_buffer_size() <= MAX_BODY  # else: not reading
    )


class RelayServer:
    """A worker's end: applies what its peers' caches were told to ``cache``, and
    wakes its writer when a turn is accepted (:meth:`wake`)."""

    def __init__(self, cache: CorpusCache, metrics: Metrics) -> None:
        self._cache = cache
        self._metrics = metrics
        self._server: asyncio.Server | None = None
        #: Connected peers; True for those that asked for wake-ups (its writer).
        self._peers: dict[asyncio.StreamWriter, bool] = {}
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, path: str) -> None:
        self._server = await start_unix_server(self._serve, path)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._peers):
            writer.close()  # their readers end without being cancelled
        if self._connections:
            await asyncio.wait(self._connections, timeout=1.0)
        for task in list(self._connections):
            task.cancel()

    def wake(self) -> None:
        """Tell this worker's writer a turn is waiting (never blocks)."""
        woken = 0
        for writer, wants in list(self._peers.items()):
            if wants and _writable(writer):
                writer.write(FRAME.pack(WAKE, 0))
                woken += 1
        outcome = "sent" if woken else "dropped"
        self._metrics.relay_frames.labels(kind="wake", outcome=outcome).inc()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        current = asyncio.current_task()
        if current is not None:
            self._connections.add(current)
        try:
            kind, size = FRAME.unpack(await reader.readexactly(FRAME.size))
            if kind != HELLO or size != 1:
                self._refuse(kind, size)
                return
            self._peers[writer] = (await reader.readexactly(1)) == b"1"
            self._metrics.relay_connections.set(len(self._peers))
            while True:
                kind, size = FRAME.unpack(await reader.readexactly(FRAME.size))
                if size > MAX_BODY or kind not in (APPLY, INVALIDATE, INVALIDATE_USER):
                    self._refuse(kind, size)
                    return
                self._receive(kind, await reader.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the peer closed its end (or is gone)
        finally:
            self._peers.pop(writer, None)
            self._metrics.relay_connections.set(len(self._peers))
            writer.close()
            if current is not None:
                self._connections.discard(current)

    def _refuse(self, kind: bytes, size: int) -> None:
        self._metrics.relay_frames.labels(kind="unknown", outcome="malformed").inc()
        log.warning("cache relay frame refused (kind %r, %d bytes); closing", kind, size)

    def _receive(self, kind: bytes, body: bytes) -> None:
        name = _KIND_NAMES[kind]
        try:
            if len(body) < STAMP.size:
                raise ValueError("no write stamp")
            (stamp,) = STAMP.unpack_from(body)
            body = body[STAMP.size :]
            if kind == INVALIDATE_USER:
                user_id = json.loads(body)
                if not isinstance(user_id, str):
                    raise ValueError("not a user id")
                self._cache.invalidate_user(user_id, stamp=stamp)
            else:
                records = decode_records(body)
                if kind == APPLY:
                    self._cache.apply(records, stamp=stamp)
                else:
                    for record in records:
                        self._cache.invalidate(record, stamp=stamp)
        except (ValueError, RecursionError):  # RecursionError: JSON nested too deep
            self._metrics.relay_frames.labels(kind=name, outcome="malformed").inc()
            return
        self._metrics.relay_frames.labels(kind=name, outcome="received").inc()


class RelayClient:
    """One connection to a peer's :class:`RelayServer`, made (and made again) in the
    background after :meth:`start`. With ``on_wake`` it asks for wake-ups and calls
    it on each (and on connecting: turns may have waited meanwhile)."""

    def __init__(
        self, path: str, metrics: Metrics, on_wake: Callable[[], None] | None = None
    ) -> None:
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
            self._task = asyncio.create_task(self._run(), name="cache-relay")

    async def wait_connected(self, timeout_s: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._connected.wait()
        return self.connected

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
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
            writer.write(FRAME.pack(HELLO, 1) + (b"1" if self._on_wake else b"0"))
            self._writer = writer
            self._connected.set()
            try:
                if self._on_wake is not None:
                    self._on_wake()
                while True:
                    kind, size = FRAME.unpack(await reader.readexactly(FRAME.size))
                    if kind != WAKE or size or self._on_wake is None:
                        self._metrics.relay_frames.labels(kind="unknown", outcome="malformed").inc()
                        break
                    self._metrics.relay_frames.labels(kind="wake", outcome="received").inc()
                    self._on_wake()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass  # the peer is gone: connect again when it is back
            finally:
                self._connected.clear()
                self._writer = None
                writer.close()

    def send(self, kind: bytes, body: bytes) -> None:
        """Send one frame now, or count it dropped (not connected, or not reading)."""
        name = _KIND_NAMES[kind]
        writer = self._writer
        if writer is None or not _writable(writer):
            self._metrics.relay_frames.labels(kind=name, outcome="dropped").inc()
            return
        writer.write(FRAME.pack(kind, len(body)) + body)
        self._metrics.relay_frames.labels(kind=name, outcome="sent").inc()


class RelayPeers:
    """A :class:`~sidecar.memory.corpus.write_stamps.CacheMirror` that tells every peer
    (one :class:`RelayClient` each) what this process's cache was told."""

    def __init__(self, clients: Sequence[RelayClient]) -> None:
        self.clients = tuple(clients)

    def start(self) -> None:
        for client in self.clients:
            client.start()

    async def close(self) -> None:
        for client in self.clients:
            await client.close()

    def _send(self, kind: bytes, body: bytes) -> None:
        for client in self.clients:
            client.send(kind, body)

    def applied(self, records: Sequence[MemoryRecord], stamp: int) -> None:
        if records and self.clients:
            self._send(APPLY, STAMP.pack(stamp) + encode_records(records))

    def invalidated(self, records: Sequence[MemoryRecord], stamp: int) -> None:
        if records and self.clients:
            self._send(INVALIDATE, STAMP.pack(stamp) + encode_records(records))

    def invalidated_user(self, user_id: str, stamp: int) -> None:
        if self.clients:
            self._send(INVALIDATE_USER, STAMP.pack(stamp) + json.dumps(user_id).encode())
