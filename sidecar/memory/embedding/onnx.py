"""The ONNX Runtime backends (``onnx`` and ``onnx-int8``) for sentence-transformers models.

At start-up the model's transformer is exported (and, for ``onnx-int8``, quantized)
into the cache (:mod:`sidecar.memory.embedding.onnx_cache`); at run time only
``tokenizers``, ``numpy`` and ``onnxruntime`` are used, through sentence-transformers'
pipeline for these models (:mod:`sidecar.memory.embedding.onnx_pipeline`).

Dynamic quantization scales activations per tensor, over the whole batch: an int8
vector would depend on what else shares its batch. ``onnx-int8`` therefore runs each
text on its own (still coalesced into one job per micro-batch); ``onnx`` runs
batches, grouped by length to bound padding.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from sidecar.config import EmbeddingConfig
from sidecar.errors import EmbeddingError
from sidecar.memory.embedding.onnx_cache import (
    CachedModel,
    OnnxBackend,
    cpu_has_vnni,
    ensure_model,
    manifest_path,
    open_session,
)
from sidecar.memory.embedding.onnx_pipeline import (
    INPUT_NAMES,
    OUTPUT_NAME,
    Pipeline,
    TextTokenizer,
    pool,
    read_pipeline,
)
from sidecar.memory.embedding.protocol import Vectors, resolve_model_path, set_offline_env

#: Largest share of padding tokens in one batched model call (``onnx`` backend).
_MAX_PADDING: Final = 0.25


class OnnxEncoder:
    """The ``onnx`` / ``onnx-int8`` backends: blocking ``encode`` for :class:`BatchingEmbedder`."""

    def __init__(
        self,
        session: Any,
        tokenizer: TextTokenizer,
        pipeline: Pipeline,
        *,
        per_text: bool,
        batch_size: int,
        artifact: CachedModel | None = None,
    ) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._pipeline = pipeline
        self._per_text = per_text
        self._batch_size = batch_size
        self._inputs = {i.name for i in session.get_inputs()}
        missing = self._inputs - set(INPUT_NAMES)
        if missing:
            raise EmbeddingError(f"the ONNX model wants unknown inputs {sorted(missing)}")
        #: The cache file this encoder runs (None when built from a session directly).
        self.artifact = artifact

    @classmethod
    def load(cls, config: EmbeddingConfig) -> OnnxEncoder:
        """Export/quantize into the cache if needed, then open it (blocking, seconds)."""
        if config.backend == "torch":
            raise EmbeddingError("OnnxEncoder serves the onnx and onnx-int8 backends")
        model_dir, pipeline = _local_model(config)
        tokenizer = TextTokenizer(pipeline.transformer_dir, pipeline.max_seq_length)
        backend: OnnxBackend = config.backend
        reduce_range = backend == "onnx-int8" and not cpu_has_vnni()
        args = (model_dir, Path(config.cache_dir), backend, pipeline)
        artifact, data = ensure_model(*args, reduce_range=reduce_range)
        try:
            session = open_session(data, threads=config.threads)
        except EmbeddingError:
            if artifact.built:
                raise
            # It hashes right but will not load (written by another version?): rebuild once.
            manifest_path(artifact.path).unlink(missing_ok=True)
            artifact, data = ensure_model(*args, reduce_range=reduce_range)
            session = open_session(data, threads=config.threads)
        del data
        encoder = cls(
            session,
            tokenizer,
            pipeline,
            per_text=backend == "onnx-int8",
            batch_size=config.batch_size,
            artifact=artifact,
        )
        if encoder.encode(["ready"]).shape != (1, pipeline.dim):
            raise EmbeddingError("the ONNX model's output does not match its pooling config")
        return encoder

    @staticmethod
    def prepare(config: EmbeddingConfig) -> list[CachedModel]:
        """Every file the configured ONNX backend may load, in ``embedding.cache_dir``:
        the export and, for ``onnx-int8``, both quantizations (the one a CPU without
        VNNI needs and the other), so that a start on any CPU finds its file. For
        images, which prepare them at build time and start with nothing to write.
        Blocking, tens of seconds when nothing is cached."""
        if config.backend == "torch":
            raise EmbeddingError("the torch backend has no files to prepare")
        model_dir, pipeline = _local_model(config)
        args = (model_dir, Path(config.cache_dir), config.backend, pipeline)
        variants = (False, True) if config.backend == "onnx-int8" else (False,)
        return [ensure_model(*args, reduce_range=r)[0] for r in variants]

    @property
    def dim(self) -> int:
        return self._pipeline.dim

    def encode(self, texts: list[str]) -> Vectors:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        rows = self._tokenizer.encode(texts)
        if self._per_text:
            for i, row in enumerate(rows):
                out[i] = self._run([row])[0]
            return out
        for chunk in self._chunks([len(ids) for ids, _ in rows]):
            out[chunk] = self._run([rows[i] for i in chunk])
        return out

    def _chunks(self, lengths: list[int]) -> Iterator[list[int]]:
        """Row indices in model calls: by length, at most ``batch_size`` rows, and
        padding at most ``_MAX_PADDING`` of a call's tokens (one long text padding 31
        short ones to its length would cost far more than running it apart)."""
        chunk: list[int] = []
        tokens = 0
        for i in sorted(range(len(lengths)), key=lengths.__getitem__):
            padded = (len(chunk) + 1) * lengths[i]  # sorted: this row sets the width
            if chunk and (
                len(chunk) == self._batch_size
                or padded - tokens - lengths[i] > _MAX_PADDING * padded
            ):
                yield chunk
                chunk, tokens = [], 0
            chunk.append(i)
            tokens += lengths[i]
        if chunk:
            yield chunk

    def _run(self, rows: list[tuple[list[int], list[int]]]) -> npt.NDArray[np.float32]:
        batch = self._tokenizer.pad(rows)
        feed = {name: value for name, value in batch.items() if name in self._inputs}
        hidden = self._session.run([OUTPUT_NAME], feed)[0]
        return pool(hidden, batch["attention_mask"], self._pipeline.pooling)


def _local_model(config: EmbeddingConfig) -> tuple[Path, Pipeline]:
    """The configured model's local directory and pipeline (offline: nothing is
    downloaded)."""
    set_offline_env()
    model_dir = Path(resolve_model_path(config.model))
    if not model_dir.is_dir():
        raise EmbeddingError(f"embedding model {model_dir} is not a local directory")
    return model_dir, read_pipeline(model_dir)
