"""The micro-batching adapter every local backend runs behind: concurrent ``embed()``
calls coalesced into model calls on the adapter's own inference threads, urgent
(query) calls first.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from sidecar.config import EmbeddingConfig
from sidecar.errors import EmbeddingError
from sidecar.memory.embedding.protocol import EncodeFn, Encoder, Vectors


@dataclass(slots=True, eq=False)
class _Call:
    texts: list[str]
    future: asyncio.Future[Vectors]
    #: Texts handed to the model so far (background calls run in slices).
    taken: int = 0
    #: Rows back so far; slices may come back out of order (several lanes).
    delivered: int = 0
    parts: list[tuple[int, Vectors]] = field(default_factory=list)


@dataclass(slots=True)
class BatchStats:
    """What the batcher has done so far (for benchmarks and tests)."""

    #: Model calls (one per batch).
    batches: int = 0
    #: Texts embedded.
    texts: int = 0
    #: Largest batch, in texts.
    largest: int = 0
    #: ``embed()`` calls refused because the queue was full.
    rejected: int = 0


class BatchingEmbedder:
    """An :class:`Embedder` running a blocking ``encode`` on its own inference threads.

    Up to ``lanes`` model calls run at once, each on its own thread (ONNX Runtime and
    torch release the GIL while they compute). Concurrent ``embed()`` calls are
    coalesced: a call arriving while a lane is idle runs at once (after
    ``batch_wait_ms``, 0 by default); calls arriving while every lane is busy queue,
    and when one frees up it takes its share of what is queued (the queued texts split
    evenly over the lanes, up to ``max_batch`` texts; a single larger call runs
    alone) as one batch. *Urgent* calls (a request is
    waiting for them) always go first; background calls run in slices of at most
    ``background_batch`` texts, so an urgent call never waits behind more than one
    small slice (the model's cost per text hardly depends on the batch size here).
    Each caller gets its own rows back. A failing batch fails only its own calls
    (a background call entirely), with :class:`EmbeddingError`. A cancelled caller is
    dropped from the queue, or its rows discarded if its batch is already running;
    other callers are unaffected. At most ``max_queue`` calls wait;
    more fail at once. One event loop at a time may use an instance.
    """

    def __init__(
        self,
        encode: EncodeFn,
        *,
        dim: int,
        max_batch: int = 32,
        batch_wait_ms: float = 0.0,
        max_queue: int = 1024,
        background_batch: int = 4,
        lanes: int = 1,
        thread_name: str = "embed",
    ) -> None:
        if dim <= 0:
            raise EmbeddingError("the embedding model does not report its dimension")
        if min(max_batch, max_queue, background_batch, lanes) < 1 or batch_wait_ms < 0:
            raise ValueError(
                "max_batch, max_queue, background_batch and lanes must be >= 1, batch_wait_ms >= 0"
            )
        self._encode = encode
        self._dim = dim
        self._max_batch = max_batch
        self._batch_wait_s = batch_wait_ms / 1000.0
        self._max_queue = max_queue
        self._background_batch = background_batch
        self._lanes = lanes
        self._urgent: deque[_Call] = deque()
        self._pending: deque[_Call] = deque()
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=lanes, thread_name_prefix=thread_name)
        self.stats = BatchStats()

    @classmethod
    def for_encoder(cls, encoder: Encoder, config: EmbeddingConfig) -> BatchingEmbedder:
        return cls(
            encoder.encode,
            dim=encoder.dim,
            max_batch=config.max_batch,
            batch_wait_ms=config.batch_wait_ms,
            max_queue=config.max_queue,
            background_batch=config.background_batch,
            lanes=config.lanes,
        )

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def queued(self) -> int:
        """``embed()`` calls waiting for a lane."""
        return len(self._urgent) + len(self._pending)

    async def embed(self, texts: Sequence[str], *, urgent: bool = False) -> Vectors:
        if self._closed:
            raise EmbeddingError("the embedder is closed")
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        loop = asyncio.get_running_loop()
        worker = self._worker
        if worker is not None and not worker.done() and worker.get_loop() is not loop:
            raise EmbeddingError("the embedder is in use by another event loop")
        if len(self._urgent) + len(self._pending) >= self._max_queue:
            self._drop_cancelled()
            if len(self._urgent) + len(self._pending) >= self._max_queue:
                self.stats.rejected += 1
                raise EmbeddingError("the embedding queue is full")
        call = _Call(list(texts), loop.create_future())
        (self._urgent if urgent else self._pending).append(call)
        if worker is None or worker.done():
            self._worker = loop.create_task(self._drain(), name="embed-batcher")
        # Cancelling the caller cancels ``call.future`` only; the batch goes on.
        return await call.future

    def _drop_cancelled(self) -> None:
        self._urgent = deque(call for call in self._urgent if not call.future.done())
        self._pending = deque(call for call in self._pending if not call.future.done())

    def _take_batch(self) -> list[tuple[_Call, int, int]]:
        """The next model call: (call, start, end) slices of its texts. Urgent calls
        whole (up to ``max_batch`` texts, and with several lanes up to an even share
        of the queued urgent texts: a model call costs the same per text whatever its
        size, so a queue split over the lanes is done sooner); else at most
        ``background_batch`` texts of background calls, the last one possibly cut."""
        batch: list[tuple[_Call, int, int]] = []
        size = 0
        limit = self._max_batch
        if self._lanes > 1 and self._urgent:
            queued = sum(len(call.texts) for call in self._urgent if not call.future.done())
            limit = min(limit, max(1, math.ceil(queued / self._lanes)))
        while self._urgent:
            call = self._urgent[0]
            if call.future.done():  # cancelled while queued
                self._urgent.popleft()
                continue
            if batch and size + len(call.texts) > limit:
                return batch
            self._urgent.popleft()
            batch.append((call, 0, len(call.texts)))
            size += len(call.texts)
        if batch:
            return batch
        while self._pending and size < self._background_batch:
            call = self._pending[0]
            if call.future.done():  # cancelled (or failed) while queued
                self._pending.popleft()
                continue
            start = call.taken
            end = min(len(call.texts), start + self._background_batch - size)
            call.taken = end
            if end == len(call.texts):
                self._pending.popleft()
            batch.append((call, start, end))
            size += end - start
        return batch

    def _waiting(self) -> bool:
        return bool(self._urgent or self._pending)

    async def _drain(self) -> None:
        """Feeds the lanes until nothing is queued or running."""
        running: dict[asyncio.Future[Vectors], list[tuple[_Call, int, int]]] = {}
        try:
            if self._batch_wait_s > 0:  # the model was idle: let a few more calls arrive
                await asyncio.sleep(self._batch_wait_s)
            while self._waiting() or running:
                while self._waiting() and len(running) < self._lanes:
                    batch = self._take_batch()
                    if batch:
                        running[self._start(batch)] = batch
                if not running:
                    continue
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for future in done:
                    batch = running.pop(future)
                    exc = future.exception()
                    if exc is not None:  # the backend's errors of every kind
                        self._fail(batch, exc)
                    else:
                        self._deliver(batch, future.result())
        except asyncio.CancelledError:  # close(): nobody may wait forever
            for batch in running.values():
                self._fail(batch, EmbeddingError("the embedder is closed"))
            self._fail_pending(EmbeddingError("the embedder is closed"))
            raise

    def _start(self, batch: list[tuple[_Call, int, int]]) -> asyncio.Future[Vectors]:
        texts = [text for call, start, end in batch for text in call.texts[start:end]]
        return asyncio.get_running_loop().run_in_executor(self._executor, self._run, texts)

    def _run(self, texts: list[str]) -> Vectors:
        """On the inference thread: one model call, its shape checked."""
        vectors = np.asarray(self._encode(texts), dtype=np.float32)
        if vectors.shape != (len(texts), self._dim):
            raise EmbeddingError(
                f"the embedding model returned shape {vectors.shape},"
                f" expected {(len(texts), self._dim)}"
            )
        return vectors

    def _deliver(self, batch: list[tuple[_Call, int, int]], vectors: Vectors) -> None:
        stats = self.stats
        stats.batches += 1
        stats.texts += len(vectors)
        stats.largest = max(stats.largest, len(vectors))
        row = 0
        for call, start, end in batch:
            part = vectors[row : row + end - start]
            row += end - start
            if call.future.done():
                continue
            call.parts.append((start, part))
            call.delivered += end - start
            if call.delivered == len(call.texts):
                parts = sorted(call.parts, key=lambda item: item[0])
                rows = parts[0][1] if len(parts) == 1 else np.concatenate([p for _, p in parts])
                call.parts = []
                call.future.set_result(rows)

    @staticmethod
    def _fail(batch: list[tuple[_Call, int, int]], exc: BaseException) -> None:
        message = (
            str(exc)
            if isinstance(exc, EmbeddingError)
            else f"embedding failed: {type(exc).__name__}"
        )
        for call, _start, _end in batch:
            if not call.future.done():
                error = EmbeddingError(message)
                error.__cause__ = exc
                call.future.set_exception(error)

    def _fail_pending(self, error: EmbeddingError) -> None:
        for queue in (self._urgent, self._pending):
            while queue:
                call = queue.popleft()
                if not call.future.done():
                    call.future.set_exception(EmbeddingError(str(error)))

    async def close(self) -> None:
        """Fail queued and running calls and stop the inference thread (no waiting)."""
        self._closed = True
        worker, self._worker = self._worker, None
        if worker is not None and not worker.done():
            worker.cancel()
            if worker.get_loop() is asyncio.get_running_loop():
                await asyncio.wait([worker])  # its cancellation is not ours to raise
        self._fail_pending(EmbeddingError("the embedder is closed"))
        self._executor.shutdown(wait=False, cancel_futures=True)
