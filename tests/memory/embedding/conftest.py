"""The encoders the embedding tests compare, loaded once per session: torch (the
reference), ONNX fp32 and ONNX int8 (exported into the session's cache directory,
see ``tests/conftest.py``), and the reference vectors of the sample texts.
"""

from __future__ import annotations

import pytest

from sidecar.config import EmbeddingConfig
from sidecar.memory.embedding.onnx import OnnxEncoder
from sidecar.memory.embedding.protocol import Vectors
from sidecar.memory.embedding.torch_backend import SentenceTransformerEncoder
from tests.memory.embedding.embedding_support import SAMPLES, one_by_one


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
