"""The micro-batcher in front of an encoder (``BatchingEmbedder``), over fake models
a test controls: calls queued behind a busy model run as one batch, urgent calls
first, lanes side by side, failures and cancellations confined to their calls,
the bound, closing, the batch wait and wrong shapes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from sidecar.errors import EmbeddingError
from sidecar.memory.embedding.batching import BatchingEmbedder
from sidecar.memory.embedding.protocol import Vectors

# -- the micro-batcher ----------------------------------------------------------------


class GatedModel:
    """A fake model: each text becomes a one-hot vector of its number; the first call
    blocks until released, so later calls pile up behind it."""

    dim = 8

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.fail_on = "boom"

    def encode(self, texts: list[str]) -> Vectors:
        self.batches.append(list(texts))
        self.started.set()
        if not self.release.wait(timeout=10):
            raise TimeoutError
        if self.fail_on in texts:
            raise ValueError("private text must not leak")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row, int(text.split()[-1]) % self.dim] = 1.0
        return out


@pytest.fixture
def gated() -> Iterator[GatedModel]:
    model = GatedModel()
    yield model
    model.release.set()


async def wait_started(model: GatedModel) -> None:
    for _ in range(1000):
        if model.started.is_set():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the model never started")


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_calls_queued_behind_a_busy_model_run_as_one_batch(gated: GatedModel) -> None:
    batcher = BatchingEmbedder(gated.encode, dim=GatedModel.dim, max_batch=32)
    first = asyncio.create_task(batcher.embed(["text 0"], urgent=True))
    await wait_started(gated)
    rest = [asyncio.create_task(batcher.embed([f"text {i}"], urgent=True)) for i in range(1, 11)]
    await settle()
    gated.release.set()
    results = await asyncio.gather(first, *rest)
    assert [len(batch) for batch in gated.batches] == [1, 10]
    for i, vectors in enumerate(results):
        assert vectors.shape == (1, GatedModel.dim)
        assert int(np.argmax(vectors[0])) == i % GatedModel.dim
    assert batcher.stats.batches == 2
    assert batcher.stats.largest == 10
    await batcher.close()


async def test_max_batch_splits_the_queue(gated: GatedModel) -> None:
    batcher = BatchingEmbedder(gated.encode, dim=GatedModel.dim, max_batch=4)
    first = asyncio.create_task(batcher.embed(["text 0"], urgent=True))
    await wait_started(gated)
    two = asyncio.create_task(batcher.embed(["text 1", "text 2"], urgent=True))
    rest = [asyncio.create_task(batcher.embed([f"text {i}"], urgent=True)) for i in range(3, 9)]
    big = asyncio.create_task(batcher.embed([f"text {i}" for i in range(9, 15)], urgent=True))
    await settle()
    gated.release.set()
    await asyncio.gather(first, two, *rest, big)
    # FIFO; a call is never split; one larger than max_batch runs alone.
    assert [len(batch) for batch in gated.batches] == [1, 4, 4, 6]
    assert (await big).shape == (6, GatedModel.dim)
    await batcher.close()


async def test_urgent_calls_go_before_background_work_sliced_small(gated: GatedModel) -> None:
    batcher = BatchingEmbedder(gated.encode, dim=GatedModel.dim, max_batch=32, background_batch=3)
    facts = asyncio.create_task(batcher.embed([f"text {i}" for i in range(10)]))
    await wait_started(gated)
    more = asyncio.create_task(batcher.embed(["text 10", "text 11"]))
    queries = [asyncio.create_task(batcher.embed([f"text {i}"], urgent=True)) for i in (20, 21)]
    await settle()
    gated.release.set()
    done = await facts
    # The first slice was running; then both queries at once, then the rest in slices
    # of at most 3 texts, the second call's texts following the first's.
    assert gated.batches == [
        ["text 0", "text 1", "text 2"],
        ["text 20", "text 21"],
        ["text 3", "text 4", "text 5"],
        ["text 6", "text 7", "text 8"],
        ["text 9", "text 10", "text 11"],
    ]
    assert [int(np.argmax(row)) for row in done] == [i % GatedModel.dim for i in range(10)]
    assert [int(np.argmax(row)) for row in await more] == [10 % 8, 11 % 8]
    assert [int(np.argmax((await q)[0])) for q in queries] == [20 % 8, 21 % 8]
    await batcher.close()


class LaneModel:
    """A fake model whose calls each block on their own gate, so a test decides the
    order they finish in; records how many run at once."""

    dim = 8

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gates: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.running = 0
        self.most_running = 0

    def gate(self, first_text: str) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(first_text, threading.Event())

    def encode(self, texts: list[str]) -> Vectors:
        with self.lock:
            self.batches.append(list(texts))
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            if not self.gate(texts[0]).wait(timeout=10):
                raise TimeoutError
        finally:
            with self.lock:
                self.running -= 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row, int(text.split()[-1]) % self.dim] = 1.0
        return out

    def release_all(self) -> None:
        for text in [f"text {i}" for i in range(64)]:
            self.gate(text).set()


async def wait_for(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition never met")


async def test_lanes_run_model_calls_side_by_side_and_split_the_queue() -> None:
    model = LaneModel()
    batcher = BatchingEmbedder(model.encode, dim=LaneModel.dim, lanes=2, max_batch=32)
    try:
        first = asyncio.create_task(batcher.embed(["text 0"], urgent=True))
        second = asyncio.create_task(batcher.embed(["text 1"], urgent=True))
        await wait_for(lambda: model.running == 2)  # both lanes busy at once
        queued = [
            asyncio.create_task(batcher.embed([f"text {i}"], urgent=True)) for i in (2, 3, 4, 5)
        ]
        await settle()
        model.gate("text 1").set()  # the second lane frees first: it takes its half
        await wait_for(lambda: len(model.batches) == 3)
        assert model.batches[2] == ["text 2", "text 3"]
        model.release_all()
        results = await asyncio.gather(first, second, *queued)
        assert [int(np.argmax(r[0])) for r in results] == [0, 1, 2, 3, 4, 5]
        assert sorted(t for batch in model.batches[3:] for t in batch) == ["text 4", "text 5"]
        assert model.most_running == 2
    finally:
        model.release_all()
        await batcher.close()


async def test_background_slices_finishing_out_of_order_come_back_in_order() -> None:
    model = LaneModel()
    batcher = BatchingEmbedder(model.encode, dim=LaneModel.dim, lanes=2, background_batch=2)
    try:
        call = asyncio.create_task(batcher.embed([f"text {i}" for i in range(6)]))
        await wait_for(lambda: model.running == 2)
        assert model.batches == [["text 0", "text 1"], ["text 2", "text 3"]]
        model.gate("text 2").set()  # the second slice finishes first
        model.gate("text 4").set()
        await wait_for(lambda: len(model.batches) == 3)
        await settle()
        assert not call.done()
        model.gate("text 0").set()
        rows = await call
        assert [int(np.argmax(row)) for row in rows] == [0, 1, 2, 3, 4, 5]
    finally:
        model.release_all()
        await batcher.close()


def test_lanes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="lanes"):
        BatchingEmbedder(lambda texts: np.zeros((len(texts), 4), np.float32), dim=4, lanes=0)


async def test_a_failing_slice_fails_its_whole_call(gated: GatedModel) -> None:
    batcher = BatchingEmbedder(gated.encode, dim=GatedModel.dim, background_batch=2)
    first = asyncio.create_task(batcher.embed(["text 0", "text 1", "boom", "text 3", "text 5"]))
    await wait_started(gated)
    after = asyncio.create_task(batcher.embed(["text 4"]))
    await settle()
    gated.release.set()
    with pytest.raises(EmbeddingError):
        await first
    assert int(np.argmax((await after)[0])) == 4
    # The failed call's last slice was never sent to the model.
    assert gated.batches == [["text 0", "text 1"], ["boom", "text 3"], ["text 4"]]
    await batcher.close()


async def test_a_failing_batch_fails_only_its_calls(gated: GatedModel) -> None:
    batcher = BatchingEmbedder(gated.encode, dim=GatedModel.dim, max_batch=3)
    first = asyncio.create_task(batcher.embed(["text 0"], urgent=True))
    await wait_started(gated)
    doomed = [
        asyncio.create_task(batcher.embed([t], urgent=True)) for t in ("text 1", "boom", "text 2")
    ]
    later = asyncio.create_task(batcher.embed(["text 3"], urgent=True))
    await settle()
    gated.release.set()
    assert (await first).shape == (1, GatedModel.dim)
    for task in doomed:
        with pytest.raises(EmbeddingError) as caught:
            await task
        assert "private" not in str(caught.value)
        assert "ValueError" in str(caught.value)
    assert int(np.argmax((await later)[0])) == 3
    assert (await batcher.embed(["text 5"], urgent=True)).shape == (1, GatedModel.dim)
    await batcher.close()


async def test_cancelled_callers_do_not_break_the_batch(gated: GatedModel) -> None:
    batcher = BatchingEmbedder(gated.encode, dim=GatedModel.dim)
    running = asyncio.create_task(batcher.embed(["text 0"], urgent=True))
    running_too = asyncio.create_task(batcher.embed(["text 1"], urgent=True))
    await wait_started(gated)
    queued = asyncio.create_task(batcher.embed(["text 2"], urgent=True))
    queued_too = asyncio.create_task(batcher.embed(["text 3"], urgent=True))
    await settle()
    running.cancel()  # its batch is already on the model
    queued.cancel()  # still waiting
    await settle()
    gated.release.set()
    assert int(np.argmax((await running_too)[0])) == 1
    assert int(np.argmax((await queued_too)[0])) == 3
    for task in (running, queued):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert [batch for batch in gated.batches] == [["text 0", "text 1"], ["text 3"]]
    assert not batcher._pending
    await batcher.close()


async def test_the_queue_is_bounded(gated: GatedModel) -> None:
    batcher = BatchingEmbedder(gated.encode, dim=GatedModel.dim, max_queue=2)
    first = asyncio.create_task(batcher.embed(["text 0"], urgent=True))
    await wait_started(gated)
    waiting = [asyncio.create_task(batcher.embed([f"text {i}"], urgent=True)) for i in (1, 2)]
    await settle()
    with pytest.raises(EmbeddingError, match="queue is full"):
        await batcher.embed(["text 3"], urgent=True)
    assert batcher.stats.rejected == 1
    gated.release.set()
    await asyncio.gather(first, *waiting)
    await batcher.close()


async def test_close_fails_waiting_calls(gated: GatedModel) -> None:
    batcher = BatchingEmbedder(gated.encode, dim=GatedModel.dim)
    running = asyncio.create_task(batcher.embed(["text 0"], urgent=True))
    await wait_started(gated)
    queued = asyncio.create_task(batcher.embed(["text 1"], urgent=True))
    await settle()
    await batcher.close()
    for task in (running, queued):
        with pytest.raises(EmbeddingError, match="closed"):
            await task
    with pytest.raises(EmbeddingError, match="closed"):
        await batcher.embed(["text 2"], urgent=True)


async def test_batch_wait_gathers_calls_arriving_at_an_idle_model() -> None:
    batches: list[int] = []

    def encode(texts: list[str]) -> Vectors:
        batches.append(len(texts))
        return np.ones((len(texts), 4), dtype=np.float32) / 2

    batcher = BatchingEmbedder(encode, dim=4, batch_wait_ms=200)
    first = asyncio.create_task(batcher.embed(["a"], urgent=True))
    await asyncio.sleep(0.02)
    second = asyncio.create_task(batcher.embed(["b"], urgent=True))
    await asyncio.gather(first, second)
    assert batches == [2]
    await batcher.close()


async def test_wrong_shape_from_a_backend_is_an_error() -> None:
    def encode(texts: list[str]) -> Vectors:
        return np.zeros((len(texts) + 1, 4), dtype=np.float32)

    batcher = BatchingEmbedder(encode, dim=4)
    with pytest.raises(EmbeddingError, match="shape"):
        await batcher.embed(["a"], urgent=True)
    await batcher.close()
