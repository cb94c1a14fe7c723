"""One embedding model for several sidecar processes (``embedding.shared``).

With ``server.workers`` > 1 each worker would load the model and run it itself. On a
GPU that costs every worker a CUDA context and its own graphs (memory taken from the
GPU vLLM runs on), and the kernels of different processes' contexts take turns on the
GPU instead of running as one batch. The supervisor can instead start one *encoder
process*: it runs the configured backend behind the usual
:class:`~sidecar.memory.embedding.batching.BatchingEmbedder` and serves it on a Unix socket;
each worker's :class:`RemoteEmbedder` sends it texts and gets the vectors back, so
queries of all workers are batched together.

The protocol is small and binary. On connect the server sends ``HELLO`` (magic,
dimension). A request is ``HEADER`` (id, urgent flag, payload length) and a JSON
list of texts; a reply is ``HEADER`` (the request's id, 0 ok / 1 error, length) and
``n x dim`` little-endian float32 rows, or an error message. Replies come in any
order. A lost connection fails the calls waiting on it with
:class:`~sidecar.errors.EmbeddingError` (retrieval then fails open or closed as the
profile says); the next call connects again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import socket
import struct
import time
from collections.abc import Iterator, Sequence

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar.errors import EmbeddingError
from sidecar.memory.embedding.batching import BatchingEmbedder
from sidecar.memory.embedding.protocol import Embedder, Vectors
from sidecar.metrics import serve_registry
from sidecar.tasks import cancel_and_wait
from sidecar.unix_socket import start_unix_server

log = logging.getLogger(__name__)

MAGIC = b"SENC"
HELLO = struct.Struct("<4sI")  # magic, dimension
HEADER = struct.Struct("<IBI")  # id, flag (request: urgent; reply: 0 ok, 1 error), bytes
#: Larger requests are a protocol error (the connection is closed).
MAX_PAYLOAD = 64 * 1024 * 1024
_OK, _ERROR = 0, 1


class EncoderServer:
    """Serves ``embedder`` on a Unix socket until :meth:`close`."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, path: str) -> None:
        self._server = await start_unix_server(self._serve, path)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(self._connections)

    @property
    def connections(self) -> int:
        """Workers connected now."""
        return len(self._connections)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        current = asyncio.current_task()
        if current is not None:
            self._connections.add(current)
        answering: set[asyncio.Task[None]] = set()
        try:
            writer.write(HELLO.pack(MAGIC, self._embedder.dim))
            while True:
                request_id, urgent, size = HEADER.unpack(await reader.readexactly(HEADER.size))
                if size > MAX_PAYLOAD:
                    log.warning("encoder request of %d bytes refused; closing", size)
                    return
                payload = await reader.readexactly(size)
                task = asyncio.create_task(self._answer(writer, request_id, bool(urgent), payload))
                answering.add(task)
                task.add_done_callback(answering.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the worker closed its end (or is gone)
        finally:
            for task in answering:
                task.cancel()
            writer.close()
            if current is not None:
                self._connections.discard(current)

    async def _answer(
        self, writer: asyncio.StreamWriter, request_id: int, urgent: bool, payload: bytes
    ) -> None:
        flag, body = _ERROR, b"malformed request"
        try:
            texts = json.loads(payload)
            if isinstance(texts, list) and all(isinstance(t, str) for t in texts):
                vectors = await self._embedder.embed(texts, urgent=urgent)
                flag, body = _OK, np.ascontiguousarray(vectors, dtype="<f4").tobytes()
        except EmbeddingError as exc:
            body = str(exc).encode("utf-8", "replace")
        except ValueError:  # not JSON, not UTF-8
            pass
        except Exception as exc:  # a model failure of another kind: answered, not hung
            log.error("shared encoder failed: %s", type(exc).__name__)
            body = f"embedding failed: {type(exc).__name__}".encode()
        if writer.is_closing():
            return
        writer.write(HEADER.pack(request_id, flag, len(body)) + body)
        with contextlib.suppress(ConnectionError):  # a worker that stops reading holds
            await writer.drain()  # its replies, not the encoder's memory


class EncoderMetrics(Collector):
    """The shared encoder's own Prometheus metrics: its model calls, queue and
    connected workers (the workers' ``/metrics`` count what they waited)."""

    def __init__(self, embedder: BatchingEmbedder, server: EncoderServer) -> None:
        self._embedder = embedder
        self._server = server

    def collect(self) -> Iterator[Metric]:
        stats = self._embedder.stats
        prefix = "memory_sidecar_encoder"
        yield CounterMetricFamily(f"{prefix}_batches", "Model calls", value=stats.batches)
        yield CounterMetricFamily(f"{prefix}_texts", "Texts embedded", value=stats.texts)
        yield CounterMetricFamily(
            f"{prefix}_rejected", "Calls refused: the queue was full", value=stats.rejected
        )
        yield GaugeMetricFamily(
            f"{prefix}_largest_batch", "Largest model call so far, in texts", value=stats.largest
        )
        yield GaugeMetricFamily(
            f"{prefix}_queued_calls", "Calls waiting for the model", value=self._embedder.queued
        )
        yield GaugeMetricFamily(
            f"{prefix}_connections", "Workers connected", value=self._server.connections
        )


def serve_metrics(port: int, host: str, metrics: EncoderMetrics) -> None:
    """``/metrics`` of the encoder on ``host:port`` (a thread); a port in use is
    logged, not fatal: the encoder serves the workers without it."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(metrics)
    serve_registry(registry, port, host, "shared encoder")


def read_hello(data: bytes) -> int:
    """The dimension a server announced; :class:`EmbeddingError` if it is not one."""
    magic, dim = HELLO.unpack(data)
    if magic != MAGIC or dim <= 0:
        raise EmbeddingError("the shared encoder socket does not speak the encoder protocol")
    return int(dim)


class RemoteEmbedder:
    """An :class:`~sidecar.memory.embedding.protocol.Embedder` whose model runs in the shared
    encoder process. One event loop at a time may use an instance."""

    def __init__(self, path: str, dim: int, *, connect_timeout_s: float = 5.0) -> None:
        self._path = path
        self._dim = dim
        self._connect_timeout_s = connect_timeout_s
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task[None] | None = None
        self._connecting = asyncio.Lock()
        self._pending: dict[int, tuple[asyncio.Future[Vectors], int]] = {}
        self._ids = itertools.count()
        self._closed = False

    @classmethod
    def connect(cls, path: str, *, timeout_s: float = 30.0) -> RemoteEmbedder:
        """Check that the encoder at ``path`` answers and learn its dimension
        (blocking; retried until ``timeout_s`` while the socket is not there yet)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.settimeout(max(0.1, deadline - time.monotonic()))
                    sock.connect(path)
                    data = b""
                    while len(data) < HELLO.size:
                        chunk = sock.recv(HELLO.size - len(data))
                        if not chunk:
                            raise ConnectionError("closed before its hello")
                        data += chunk
                return cls(path, read_hello(data))
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise EmbeddingError(f"the shared encoder at {path} does not answer") from exc
                time.sleep(0.1)

    @property
    def dim(self) -> int:
        return self._dim

    async def embed(self, texts: Sequence[str], *, urgent: bool = False) -> Vectors:
        if self._closed:
            raise EmbeddingError("the embedder is closed")
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        writer = await self._connection()
        request_id = next(self._ids) & 0xFFFFFFFF
        future: asyncio.Future[Vectors] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (future, len(texts))
        payload = json.dumps(list(texts)).encode()
        try:
            writer.write(HEADER.pack(request_id, int(urgent), len(payload)) + payload)
            await writer.drain()
            return await future
        except ConnectionError as exc:
            raise EmbeddingError("the shared encoder connection was lost") from exc
        finally:
            self._pending.pop(request_id, None)

    async def _connection(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            try:
                async with asyncio.timeout(self._connect_timeout_s):
                    reader, writer = await asyncio.open_unix_connection(self._path)
                    dim = read_hello(await reader.readexactly(HELLO.size))
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                raise EmbeddingError("the shared encoder is unreachable") from exc
            if dim != self._dim:
                writer.close()
                raise EmbeddingError(f"the shared encoder now embeds in {dim} dimensions")
            self._writer = writer
            self._reading = asyncio.create_task(self._read(reader, writer), name="encoder-replies")
            return writer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request_id, flag, size = HEADER.unpack(await reader.readexactly(HEADER.size))
                body = await reader.readexactly(size)
                waiting = self._pending.pop(request_id, None)
                if waiting is None or waiting[0].done():
                    continue  # its caller gave up
                future, rows = waiting
                if flag != _OK:
                    future.set_exception(EmbeddingError(body.decode("utf-8", "replace")))
                elif size != rows * self._dim * 4:
                    future.set_exception(EmbeddingError("the shared encoder sent a wrong shape"))
                else:
                    vectors = np.frombuffer(body, dtype="<f4").reshape(rows, self._dim)
                    future.set_result(vectors.astype(np.float32))  # a writable copy
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            if self._writer is writer:
                self._writer = None
            self._fail_pending("the shared encoder connection was lost")

    def _fail_pending(self, message: str) -> None:
        pending, self._pending = self._pending, {}
        for future, _rows in pending.values():
            if not future.done():
                future.set_exception(EmbeddingError(message))

    async def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.close()
        await cancel_and_wait(self._reading)
        self._fail_pending("the embedder is closed")
