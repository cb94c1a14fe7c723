"""The ``torch`` backend: a sentence-transformers model, replayed as CUDA graphs on a
CUDA device when the model qualifies (:mod:`sidecar.memory.embedding.graphed`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from sidecar.config import EmbeddingConfig
from sidecar.errors import EmbeddingError
from sidecar.memory.embedding.protocol import Encoder, Vectors, resolve_model_path, set_offline_env

log = logging.getLogger(__name__)


def load_torch_encoder(config: EmbeddingConfig) -> Encoder:
    """The ``torch`` backend: sentence-transformers, replayed as CUDA graphs on a CUDA
    device when ``cuda_graphs`` is on and the model qualifies (blocking, seconds)."""
    encoder = SentenceTransformerEncoder.load(config)
    if config.cuda_graphs and config.device.startswith("cuda"):
        return encoder.graphed(config)
    return encoder


class SentenceTransformerEncoder:
    """The ``torch`` backend: any local sentence-transformers model, on CPU or GPU."""

    def __init__(self, model: Any, *, batch_size: int) -> None:
        self._model = model
        self._batch_size = batch_size
        get_dim = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        dim = get_dim()
        if not isinstance(dim, int) or dim <= 0:
            raise EmbeddingError("the embedding model does not report its dimension")
        self._dim = dim

    @classmethod
    def load(cls, config: EmbeddingConfig) -> SentenceTransformerEncoder:
        """Load the model (blocking, seconds). Offline: nothing is downloaded."""
        set_offline_env()
        path = resolve_model_path(config.model)
        try:
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(config.threads)
            model = SentenceTransformer(
                path,
                device=config.device,
                local_files_only=True,
                model_kwargs={"dtype": getattr(torch, config.dtype)},
            )
        except Exception as exc:  # foreign library errors of every kind, at start-up
            where = path if Path(path).exists() else f"{path} (not a local directory)"
            raise EmbeddingError(f"cannot load embedding model {where}: {exc}") from exc
        return cls(model, batch_size=config.batch_size)

    def graphed(self, config: EmbeddingConfig) -> Encoder:
        """This model as CUDA graphs (:mod:`sidecar.memory.embedding.graphed`); itself,
        with a warning saying why, where the model cannot run so."""
        from sidecar.memory.embedding.graphed import graphed_encoder

        try:
            graphed = graphed_encoder(
                self._model,
                device=config.device,
                max_batch=max(config.max_batch, config.batch_size),
            )
        except EmbeddingError as exc:
            log.warning("embedding runs eagerly on %s: %s", config.device, exc)
            return self
        log.info(
            "embedding runs as %d CUDA graphs on %s (%s)",
            graphed.shapes,
            config.device,
            config.dtype,
        )
        return graphed

    @property
    def dim(self) -> int:
        return self._dim

    def encode(self, texts: list[str]) -> Vectors:
        vectors = self._model.encode(
            texts,
            batch_size=self._batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self._dim)
