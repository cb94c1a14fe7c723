"""Embedding vectors as numpy arrays: unit length, centroids, the best of a score row."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
Vector = npt.NDArray[np.float32]


def unit(vector: npt.NDArray[np.floating]) -> Vector:
    """``vector`` scaled to length 1 (a zero vector stays zero)."""
    out = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(out))
    return (out / norm).astype(np.float32) if norm > 0 else out


def centroid(vectors: Matrix) -> Vector:
    """The normalised mean of ``vectors`` (rows)."""
    if len(vectors) == 0:
        return np.zeros(vectors.shape[1] if vectors.ndim == 2 else 0, dtype=np.float32)
    return unit(np.asarray(vectors, dtype=np.float64).mean(axis=0))


def top_indices(
    scores: npt.NDArray[np.float32], limit: int, mask: npt.NDArray[np.bool_] | None = None
) -> list[int]:
    """Indices of the best ``limit`` scores (descending; ties by index)."""
    candidates = np.arange(scores.size) if mask is None else np.flatnonzero(mask)
    if candidates.size == 0 or limit <= 0:
        return []
    values = scores[candidates]
    if candidates.size > limit * 4:
        part = np.argpartition(-values, limit - 1)[:limit]
        cutoff = values[part].min()
        keep = values >= cutoff
        candidates, values = candidates[keep], values[keep]
    order = np.lexsort((candidates, -values))
    found: list[int] = candidates[order[:limit]].tolist()
    return found
